//! Findings, compile summaries and runtime settings, as text for people and JSON for pipelines.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::cost::{Cost, CostOfSafety};
use crate::engine::{Finding, Report};
use crate::rewrite::Exactness;
use crate::rules::schema::{RuntimeSetting, Target};
use crate::timing::{Timing, TimingOfSafety};

fn finding_json(f: &Finding) -> serde_json::Value {
    serde_json::json!({
        "node": f.node,
        "op": f.op,
        "rule": f.rule,
        "action": f.action,
        "kind": f.kind.as_str(),
        "why": f.why,
        "evidence": f.evidence,
        "reason": f.reason,
    })
}

/// `check --format json` without the cost figures: `{"target", "model", "findings": [{node,
/// op, rule, action, kind, why, evidence, reason}]}`.
pub fn findings_json(target: &str, model: &str, findings: &[Finding]) -> String {
    findings_json_with_cost(target, model, findings, None)
}

/// `check --format json`: [`findings_json`]'s fields, and `cost`: the checked model's cost
/// figures ([`crate::cost::Cost::to_json`]; heavy ops on the GPU, GPU pieces, crossings and
/// their bytes at the assumed sizes), when given.
pub fn findings_json_with_cost(
    target: &str,
    model: &str,
    findings: &[Finding],
    cost: Option<&Cost>,
) -> String {
    findings_json_with_timing(target, model, findings, cost, None)
}

/// `check --format json`: [`findings_json_with_cost`]'s fields, and `timing`: the checked
/// model's estimated time on the target's device ([`crate::timing::Timing::to_json`]: GPU,
/// CPU and crossing time, the longest submission against the limit and whether it holds it
/// with margin), when given.
pub fn findings_json_with_timing(
    target: &str,
    model: &str,
    findings: &[Finding],
    cost: Option<&Cost>,
    timing: Option<&Timing>,
) -> String {
    let mut v = serde_json::json!({
        "target": target,
        "model": model,
        "findings": findings.iter().map(finding_json).collect::<Vec<_>>(),
    });
    if let (Some(c), Some(o)) = (cost, v.as_object_mut()) {
        o.insert("cost".into(), c.to_json());
    }
    if let (Some(t), Some(o)) = (timing, v.as_object_mut()) {
        o.insert("timing".into(), t.to_json());
    }
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// The longest submission against the limit, in words: `12.3 ms, 0.6% of the 2000 ms limit`.
fn longest_text(t: &Timing) -> String {
    let mut s = crate::timing::ms_text(t.longest_s());
    if let (Some(l), Some(share)) = (t.limit_s, t.longest_share()) {
        let p = 100.0 * share;
        let p = if p >= 10.0 {
            format!("{p:.0}%")
        } else if p >= 0.1 {
            format!("{p:.1}%")
        } else {
            "<0.1%".to_string()
        };
        let _ = write!(s, ", {p} of the {} limit", crate::timing::ms_text(l));
    }
    s
}

/// The summary's time lines: the output's estimate on the target's device, the input's in
/// parentheses, and the slowdown.
pub fn timing_text(t: &TimingOfSafety) -> String {
    let (a, b) = (&t.after, &t.before);
    let mut s = format!("estimated time on {}:\n", a.device);
    let _ = write!(
        s,
        "  {} per inference (input {}): GPU {}, CPU {}, crossings {}",
        crate::timing::ms_text(a.total_s()),
        crate::timing::ms_text(b.total_s()),
        crate::timing::ms_text(a.gpu_s),
        crate::timing::ms_text(a.cpu_s),
        crate::timing::ms_text(a.crossing_s),
    );
    if let Some(x) = t.slowdown() {
        let _ = write!(s, "; slowdown {x:.2}x");
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "  longest GPU submission {} (input {})",
        longest_text(a),
        longest_text(b)
    );
    if a.bounded_nodes > 0 || b.bounded_nodes > 0 {
        let _ = writeln!(
            s,
            "  {}",
            bounded_text(a.bounded_nodes.max(b.bounded_nodes))
        );
    }
    s
}

/// The warning of estimates resting on sizes the compile does not know.
fn bounded_text(n: usize) -> String {
    format!(
        "{n} node(s) at sizes bounded from their neighbours, not known: the times are rough; give the sizes you run with --dim"
    )
}

/// A share of a limit as people read it: `25%`, `3.5%`.
fn share_text(share: f64) -> String {
    let p = 100.0 * share;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// `check`'s time line: the checked model's estimate, and whether its longest submission
/// holds the device's limit with margin (the share [`Timing::share`]: one over the target's
/// barrier margin, else [`crate::timing::MARGIN`]).
pub fn check_timing_text(model: &str, t: &Timing) -> String {
    let verdict = match t.longest_share() {
        None => "the runtime has no per-submission limit".to_string(),
        Some(_) if t.bounded_nodes > 0 => {
            "whether it holds the limit is not known at these sizes".to_string()
        }
        Some(x) if x <= t.share => format!(
            "it meets the limit with margin (under {} of it)",
            share_text(t.share)
        ),
        Some(x) if x <= 1.0 => format!(
            "under the limit, but not by the {} margin",
            share_text(t.share)
        ),
        Some(_) => "over the limit".to_string(),
    };
    let mut s = format!(
        "{model}: estimated {} per inference on {}; longest GPU submission {}: {verdict}\n",
        crate::timing::ms_text(t.total_s()),
        t.device,
        longest_text(t),
    );
    if t.bounded_nodes > 0 {
        let _ = writeln!(s, "{model}: {}", bounded_text(t.bounded_nodes));
    }
    s
}

/// A share in percent: whole numbers without decimals (`100%`), others with one (`69.5%`);
/// `n/a` without heavy ops.
fn percent_text(p: Option<f64>) -> String {
    match p {
        None => "n/a".into(),
        Some(p) if p.fract() == 0.0 => format!("{p:.0}%"),
        Some(p) => format!("{p:.1}%"),
    }
}

/// The summary's cost lines: the output's figures, the input's in parentheses.
pub fn cost_text(c: &CostOfSafety) -> String {
    let (a, b) = (&c.after, &c.before);
    let mut s = String::from("cost of safety: ");
    if a.heavy() == 0 && b.heavy() == 0 {
        s.push_str("no heavy ops");
    } else {
        let _ = write!(
            s,
            "heavy ops on the GPU {}/{} ({}, input {})",
            a.heavy_gpu,
            a.heavy(),
            percent_text(a.gpu_percent()),
            percent_text(b.gpu_percent())
        );
    }
    let _ = writeln!(s, ", {} GPU piece(s) (input {})", a.pieces, b.pieces);
    let _ = write!(
        s,
        "  {} CPU<->GPU crossing(s) (input {}): {} per inference at the assumed sizes (input {})",
        a.crossings,
        b.crossings,
        crate::cost::bytes_text(a.crossing_bytes),
        crate::cost::bytes_text(b.crossing_bytes)
    );
    if a.crossings_unknown > 0 || b.crossings_unknown > 0 {
        let _ = write!(
            s,
            ", and {} of unknown size (input {})",
            a.crossings_unknown, b.crossings_unknown
        );
    }
    s.push('\n');
    s
}

/// The summary's exactness lines: applied rewrites per class, the output's class, and each
/// approximate rewrite with its bound.
fn exactness_text(report: &Report) -> String {
    let mut s = String::new();
    let mut per_class = [0usize; 3];
    for a in &report.applied {
        per_class[match a.exactness {
            Exactness::Exact => 0,
            Exactness::Rounding => 1,
            Exactness::Approximate(..) => 2,
        }] += 1;
    }
    let parts: Vec<String> = ["exact", "rounding", "approximate"]
        .iter()
        .zip(per_class)
        .filter(|(_, n)| *n > 0)
        .map(|(c, n)| format!("{n} {c}"))
        .collect();
    let loosest = report.exactness();
    let _ = writeln!(
        s,
        "exactness: {}; the output is {} ({})",
        parts.join(", "),
        loosest.name(),
        loosest.bound_text()
    );
    for a in report
        .applied
        .iter()
        .filter(|a| a.exactness.is_approximate())
    {
        let _ = writeln!(
            s,
            "  approximate: {} ({}) [{}]: {}",
            display_name(&a.node),
            a.op,
            a.rule,
            a.exactness.bound_text()
        );
    }
    s
}

/// `check` as text: one line per finding, grouped by rule, then a count.
pub fn findings_text(target: &str, model: &str, findings: &[Finding]) -> String {
    let mut s = String::new();
    if findings.is_empty() {
        let _ = writeln!(s, "{model}: no rule of target {target} fires");
        return s;
    }
    let mut by_rule: BTreeMap<&str, Vec<&Finding>> = BTreeMap::new();
    for f in findings {
        by_rule.entry(f.rule.as_str()).or_default().push(f);
    }
    for (rule, fs) in &by_rule {
        let first = fs[0];
        let _ = writeln!(s, "{rule} ({}): {} node(s)", first.action, fs.len());
        let _ = writeln!(s, "  why:      {}", first.why);
        if !first.evidence.is_empty() {
            let _ = writeln!(s, "  evidence: {}", first.evidence.join(", "));
        }
        for f in fs.iter().take(50) {
            // A graph-wide finding (a piece over budget) names where it starts, with no op.
            let mut line = if f.op.is_empty() {
                format!("  - {}", display_name(&f.node))
            } else {
                format!("  - {} ({})", display_name(&f.node), f.op)
            };
            if f.kind != crate::engine::FindingKind::Fires {
                line.push_str(&format!(" [{}]", f.kind.as_str()));
            }
            if let Some(r) = &f.reason {
                line.push_str(&format!(": {r}"));
            }
            let _ = writeln!(s, "{line}");
        }
        if fs.len() > 50 {
            let _ = writeln!(s, "  ... and {} more", fs.len() - 50);
        }
    }
    let _ = writeln!(
        s,
        "{model}: {} finding(s) from {} rule(s) of target {target}",
        findings.len(),
        by_rule.len()
    );
    s
}

fn display_name(n: &str) -> &str {
    if n.is_empty() {
        "<unnamed>"
    } else {
        n
    }
}

/// Settings are session config entries, except keys `provider.<EP>.<option>`, which are
/// execution provider options.
fn split_provider(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("provider.")?;
    rest.split_once('.')
}

/// Ready-to-paste code that applies a target's runtime settings (Python and C#).
pub fn runtime_code(settings: &[RuntimeSetting]) -> String {
    let mut s = String::new();
    if settings.is_empty() {
        return s;
    }
    let esc = |x: &str| x.replace('\\', "\\\\").replace('"', "\\\"");
    let mut providers: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    let _ = writeln!(s, "# Python (onnxruntime)");
    let _ = writeln!(s, "so = onnxruntime.SessionOptions()");
    for r in settings {
        match split_provider(&r.key) {
            Some((ep, opt)) => providers.entry(ep).or_default().push((opt, &r.value)),
            None => {
                let _ = writeln!(
                    s,
                    "so.add_session_config_entry(\"{}\", \"{}\")",
                    esc(&r.key),
                    esc(&r.value)
                );
            }
        }
    }
    if providers.is_empty() {
        let _ = writeln!(
            s,
            "session = onnxruntime.InferenceSession(path, so, providers=[...])"
        );
    } else {
        let list: Vec<String> = providers
            .iter()
            .map(|(ep, opts)| {
                let kv: Vec<String> = opts
                    .iter()
                    .map(|(k, v)| format!("\"{}\": \"{}\"", esc(k), esc(v)))
                    .collect();
                format!("(\"{}\", {{{}}})", esc(ep), kv.join(", "))
            })
            .collect();
        let _ = writeln!(
            s,
            "session = onnxruntime.InferenceSession(path, so, providers=[{}])",
            list.join(", ")
        );
    }
    let _ = writeln!(s, "\n// C# (Microsoft.ML.OnnxRuntime)");
    let _ = writeln!(s, "var so = new SessionOptions();");
    for r in settings {
        if split_provider(&r.key).is_none() {
            let _ = writeln!(
                s,
                "so.AddSessionConfigEntry(\"{}\", \"{}\");",
                esc(&r.key),
                esc(&r.value)
            );
        }
    }
    for (ep, opts) in &providers {
        let kv: Vec<String> = opts
            .iter()
            .map(|(k, v)| format!("{{ \"{}\", \"{}\" }}", esc(k), esc(v)))
            .collect();
        let dict = format!("new Dictionary<string, string> {{ {} }}", kv.join(", "));
        // The C# API names providers differently from Python; TensorRT takes an options object.
        match *ep {
            "TensorrtExecutionProvider" => {
                let _ = writeln!(s, "var trt = new OrtTensorRTProviderOptions();");
                let _ = writeln!(s, "trt.UpdateOptions({dict});");
                let _ = writeln!(s, "so.AppendExecutionProvider_Tensorrt(trt);");
            }
            other => {
                let short = match other {
                    "DmlExecutionProvider" => "DML",
                    "OpenVINOExecutionProvider" => "OpenVINO",
                    "CoreMLExecutionProvider" => "CoreML",
                    "WebGpuExecutionProvider" => "WebGPU",
                    "MIGraphXExecutionProvider" => "MIGraphX",
                    o => o,
                };
                let _ = writeln!(s, "so.AppendExecutionProvider(\"{}\", {dict});", esc(short));
            }
        }
    }
    let _ = writeln!(s, "using var session = new InferenceSession(path, so);");
    s
}

/// The compile summary printed on stderr.
pub fn summary_text(report: &Report, target: &Target) -> String {
    let mut s = String::new();
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for a in &report.applied {
        *counts
            .entry((a.rule.as_str(), a.action.as_str()))
            .or_default() += 1;
    }
    if counts.is_empty() && report.fallbacks.is_empty() {
        let _ = writeln!(
            s,
            "no rule of target {} fired: the graph is unchanged",
            target.name
        );
    } else if counts.is_empty() {
        let _ = writeln!(
            s,
            "no rewrite for target {}: the nodes its rules matched fell back to the CPU (below)",
            target.name
        );
    } else {
        let _ = writeln!(
            s,
            "rewrites for target {} ({} round(s)):",
            target.name, report.iterations
        );
        for ((rule, action), n) in &counts {
            let _ = writeln!(s, "  {rule:<28} {action:<8} {n} node(s)");
        }
        s.push_str(&exactness_text(report));
    }
    if let Some(c) = &report.cost {
        s.push_str(&cost_text(c));
    }
    if let Some(t) = &report.timing {
        s.push_str(&timing_text(t));
    }
    if !report.pieces.is_empty() {
        let longest = report
            .pieces
            .iter()
            .filter_map(|p| p.seconds)
            .max_by(|a, b| a.total_cmp(b));
        if let Some(t) = longest {
            let _ = writeln!(
                s,
                "GPU submissions between CPU barriers: {} (longest estimated {})",
                report.pieces.len(),
                crate::timing::ms_text(t)
            );
        } else {
            let max = report.pieces.iter().map(|p| p.work).max().unwrap_or(0);
            let _ = writeln!(
                s,
                "GPU pieces between CPU barriers: {} (largest estimated work {:.3e})",
                report.pieces.len(),
                max as f64
            );
        }
    }
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    if !report.fallbacks.is_empty() {
        let _ = writeln!(
            s,
            "{} node(s) could not be rewritten and fell back to the CPU:",
            report.fallbacks.len()
        );
        for f in report.fallbacks.iter().take(20) {
            let _ = writeln!(
                s,
                "  - {} ({}) [{}, {}]: {}",
                display_name(&f.node),
                f.op,
                f.rule,
                f.cause,
                f.reason
            );
        }
        if report.fallbacks.len() > 20 {
            let _ = writeln!(s, "  ... and {} more", report.fallbacks.len() - 20);
        }
    }
    if !report.pinned.is_empty()
        && target.cpu_subgraphs == crate::rules::schema::CpuSubgraphs::Partition
    {
        // The runtime ignores pins: the CLI writes the CPU work as segments.
        let _ = writeln!(
            s,
            "{} node(s) marked for the CPU (layer_ann={}); this target's runtime ignores pins, so they run in CPU segments of a partition (see the manifest)",
            report.pinned.len(),
            report.annotation
        );
    } else if !report.pinned.is_empty() {
        let _ = writeln!(
            s,
            "{} node(s) pinned to the CPU with layer_ann={}; run with session option session.layer_assignment_settings=cpu({})",
            report.pinned.len(),
            report.annotation,
            report.annotation
        );
    }
    if let Some(note) = refusion_note(report, target) {
        let _ = writeln!(s, "{note}");
    }
    if !target.runtime.is_empty() {
        let _ = writeln!(
            s,
            "runtime settings (also in the model's metadata_props as onnx_safeify.runtime.*):"
        );
        for r in &target.runtime {
            let _ = writeln!(s, "  {} = {}    # {}", r.key, r.value, r.why);
        }
        s.push('\n');
        s.push_str(&runtime_code(&target.runtime));
    }
    s
}

/// Whether ONNX Runtime, at its default level "all" with the target's runtime settings, would
/// still run a fusion on the target's provider that rebuilds an op this compile decomposed
/// (`runtime::transforms::REBUILDS`, providers from `runtimes/capability/transformers.tsv`).
pub fn refusion_note(report: &Report, target: &Target) -> Option<String> {
    use crate::runtime::transforms::{Level, Session};
    let profile = crate::runtime::Profile::named(target.provider.as_deref()?)?;
    let ops: std::collections::BTreeSet<&str> = report
        .applied
        .iter()
        .filter(|a| a.action == "unfuse")
        .map(|a| a.op.as_str())
        .collect();
    let ops: Vec<&str> = ops.into_iter().collect();
    let left = Session::for_target(target, Level::All).rebuilders_left(profile.provider, &ops);
    if left.is_empty() {
        return None;
    }
    let list: Vec<String> = left
        .iter()
        .map(|(t, b)| format!("{t} ({})", b.join(", ")))
        .collect();
    Some(format!(
        "warning: ONNX Runtime would fuse back what this compile decomposed, at its default level \"all\" on {}: {}; list them in the session option {} (';'-separated; level \"basic\" still runs the level-1 ones)",
        profile.provider,
        list.join("; "),
        crate::runtime::transforms::DISABLE_OPTIMIZERS_KEY
    ))
}

/// `--report FILE.json`.
pub fn compile_json(report: &Report, target: &Target, input: &str, outputs: &[String]) -> String {
    let mut summary: BTreeMap<String, usize> = BTreeMap::new();
    for a in &report.applied {
        *summary.entry(a.rule.clone()).or_default() += 1;
    }
    let v = serde_json::json!({
        "target": target.name,
        "input": input,
        "outputs": outputs,
        "iterations": report.iterations,
        "summary": summary,
        "exactness": report.exactness().to_meta(),
        "applied": report.applied.iter().map(|a| serde_json::json!({
            "rule": a.rule, "action": a.action, "node": a.node, "op": a.op, "nodes": a.nodes,
            "exactness": a.exactness.name(), "bound": a.exactness.bound_text(),
        })).collect::<Vec<_>>(),
        "remaining": report.remaining.iter().map(finding_json).collect::<Vec<_>>(),
        "fallbacks": report.fallbacks.iter().map(|f| serde_json::json!({
            "node": f.node, "op": f.op, "rule": f.rule, "action": f.action, "cause": f.cause,
            "reason": f.reason, "to": f.to,
        })).collect::<Vec<_>>(),
        "pieces": report.pieces.iter().map(|p| {
            let mut o = serde_json::json!({
                "first": p.first, "nodes": p.nodes, "work": p.work,
            });
            // A barrier by time gives each piece its estimated milliseconds.
            if let (Some(s), Some(m)) = (p.seconds, o.as_object_mut()) {
                m.insert("ms".into(), serde_json::json!((s * 1e6).round() / 1e3));
            }
            o
        }).collect::<Vec<_>>(),
        "cost": report.cost.map(|c| serde_json::json!({
            "input": c.before.to_json(), "output": c.after.to_json(),
        })),
        "timing": report.timing.as_ref().map(TimingOfSafety::to_json),
        "slowdown": report.timing.as_ref().and_then(TimingOfSafety::slowdown).map(|x| (x * 1e4).round() / 1e4),
        "pinned": report.pinned,
        "notes": report.notes,
        "annotation": report.annotation,
        "runtime": target.runtime.iter().map(|r| serde_json::json!({
            "key": r.key, "value": r.value, "why": r.why, "evidence": r.evidence,
        })).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}
