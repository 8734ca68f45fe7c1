//! Where ONNX Runtime put each node, read from its own verbose log: the lines that
//! `VerifyEachNodeIsAssignedToAnEp` writes at session creation, e.g.
//!
//! ```text
//! ... VerifyEachNodeIsAssignedToAnEp]  All nodes placed on [WebGpuExecutionProvider]. Number of nodes: 157
//! ... VerifyEachNodeIsAssignedToAnEp] Node placements
//! ... VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2
//! ... VerifyEachNodeIsAssignedToAnEp]   Max (Conv@16/barrier_1)
//! ```

use serde::Serialize;

/// Nodes one execution provider received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderPlacement {
    pub provider: String,
    pub nodes: usize,
}

/// A node as the runtime names it (after its own graph optimisations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacedNode {
    pub op: String,
    pub name: String,
    /// The node carries `layer_ann` (pinned by the rewrite); otherwise the runtime chose
    /// the CPU itself.
    pub pinned: bool,
    /// The reason the runtime logged for choosing the CPU, when it logged one (ONNX
    /// Runtime's "Force fallback to CPU execution for node: N because ...").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The placement the runtime logged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Placement {
    /// Node counts per execution provider, in the order logged.
    pub providers: Vec<ProviderPlacement>,
    /// Nodes on `CPUExecutionProvider` (empty when everything is on one provider).
    pub cpu_nodes: Vec<PlacedNode>,
}

impl Placement {
    /// Nodes placed on `provider` (0 if it received none).
    pub fn count(&self, provider: &str) -> usize {
        self.providers
            .iter()
            .filter(|p| p.provider == provider)
            .map(|p| p.nodes)
            .sum()
    }

    /// `WebGpuExecutionProvider 218, CPUExecutionProvider 14`.
    pub fn summary(&self) -> String {
        self.providers
            .iter()
            .map(|p| format!("{} {}", p.provider, p.nodes))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

const MARKER: &str = "VerifyEachNodeIsAssignedToAnEp]";
const FALLBACK: &str = "Force fallback to CPU execution for node: ";
const CANDIDATE: &str = "Candidate for fallback CPU execution: ";
/// The CPU provider's name in ONNX Runtime's logs.
pub const CPU_PROVIDER: &str = "CPUExecutionProvider";

/// Reads the placement from log lines; `None` when the log has none (the session was not
/// created, or the log level was above verbose). When a log holds several sessions' placements
/// the last one is kept.
pub fn parse_placement<S: AsRef<str>>(lines: &[S]) -> Option<Placement> {
    let mut found: Option<Placement> = None;
    let mut current: Option<String> = None;
    let mut reasons: Vec<(String, String)> = Vec::new();
    for line in lines {
        let line = line.as_ref();
        if let Some(pos) = line.find(FALLBACK) {
            let rest = line[pos + FALLBACK.len()..].trim_end();
            if let Some((name, why)) = rest.split_once(" because ") {
                reasons.push((name.to_string(), why.to_string()));
            }
        } else if let Some(pos) = line.find(CANDIDATE) {
            let name = line[pos + CANDIDATE.len()..].trim();
            reasons.push((
                name.to_string(),
                "ONNX Runtime prefers the CPU for it (a candidate for fallback CPU execution: shape-related computations whose results are read on the CPU)".into(),
            ));
        }
        let Some(pos) = line.find(MARKER) else {
            current = None;
            continue;
        };
        let rest = &line[pos + MARKER.len()..];
        let text = rest.trim();
        if let Some((provider, n)) = provider_line(text, "All nodes placed on [") {
            found = Some(Placement {
                providers: vec![ProviderPlacement { provider, nodes: n }],
                cpu_nodes: Vec::new(),
            });
            current = None;
        } else if text == "Node placements" {
            found = Some(Placement::default());
            current = None;
        } else if let Some((provider, n)) = provider_line(text, "Node(s) placed on [") {
            let p = found.get_or_insert_with(Placement::default);
            p.providers.push(ProviderPlacement {
                provider: provider.clone(),
                nodes: n,
            });
            current = Some(provider);
        } else if let (Some(provider), Some(node)) = (&current, node_line(text)) {
            if provider == CPU_PROVIDER {
                if let Some(p) = found.as_mut() {
                    p.cpu_nodes.push(node);
                }
            }
        }
    }
    if let Some(p) = found.as_mut() {
        for n in &mut p.cpu_nodes {
            n.reason = reasons
                .iter()
                .rev()
                .find(|(name, _)| name == &n.name)
                .map(|(_, why)| why.clone());
        }
    }
    found
}

/// `PREFIX NAME]. Number of nodes: N` -> (NAME, N).
fn provider_line(text: &str, prefix: &str) -> Option<(String, usize)> {
    let rest = text.strip_prefix(prefix)?;
    let (name, tail) = rest.split_once(']')?;
    let n = tail
        .trim()
        .strip_prefix(". Number of nodes:")?
        .trim()
        .parse()
        .ok()?;
    Some((name.to_string(), n))
}

/// `OpType (node name)`.
fn node_line(text: &str) -> Option<PlacedNode> {
    let (op, rest) = text.split_once(" (")?;
    let name = rest.strip_suffix(')')?;
    if op.is_empty() || op.contains(' ') {
        return None;
    }
    Some(PlacedNode {
        op: op.to_string(),
        name: name.to_string(),
        pinned: false,
        reason: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "2026-01-01 00:00:00.0 [V:onnxruntime:, session_state.cc:1383 VerifyEachNodeIsAssignedToAnEp]";

    #[test]
    fn all_on_one_provider() {
        let lines = vec![
            "unrelated".to_string(),
            format!("{P}  All nodes placed on [WebGpuExecutionProvider]. Number of nodes: 157"),
        ];
        let p = parse_placement(&lines).unwrap();
        assert_eq!(p.count("WebGpuExecutionProvider"), 157);
        assert_eq!(p.count(CPU_PROVIDER), 0);
        assert!(p.cpu_nodes.is_empty());
    }

    #[test]
    fn mixed_placement_lists_cpu_nodes_only() {
        let lines = vec![
            format!("{P} Node placements"),
            format!("{P}  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2"),
            format!("{P}   Max (Conv@16/barrier_1)"),
            format!("{P}   Resize (up (odd name))"),
            format!("{P}  Node(s) placed on [WebGpuExecutionProvider]. Number of nodes: 3"),
            format!("{P}   Add (Add@0)"),
            "something else".to_string(),
            format!("{P}   Add (after an unrelated line: not listed)"),
        ];
        let p = parse_placement(&lines).unwrap();
        assert_eq!(
            p.summary(),
            "CPUExecutionProvider 2, WebGpuExecutionProvider 3"
        );
        assert_eq!(
            p.cpu_nodes,
            vec![
                PlacedNode {
                    op: "Max".into(),
                    name: "Conv@16/barrier_1".into(),
                    pinned: false,
                    reason: None,
                },
                PlacedNode {
                    op: "Resize".into(),
                    name: "up (odd name)".into(),
                    pinned: false,
                    reason: None,
                },
            ]
        );
    }

    #[test]
    fn fallback_reasons_are_attached() {
        let lines = vec![
            "x [I:onnxruntime:, fallback_cpu_capability.cc:167 GetCpuPreferredNodes] ORT optimization- Force fallback to CPU execution for node: p2o.Cast.14 because the CPU execution path is deemed faster".to_string(),
            format!("{P} Node placements"),
            format!("{P}  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2"),
            format!("{P}   Cast (p2o.Cast.14)"),
            format!("{P}   Max (barrier)"),
        ];
        let p = parse_placement(&lines).unwrap();
        assert_eq!(
            p.cpu_nodes[0].reason.as_deref(),
            Some("the CPU execution path is deemed faster")
        );
        assert_eq!(p.cpu_nodes[1].reason, None);
    }

    #[test]
    fn no_placement_lines() {
        assert_eq!(parse_placement(&["a", "b"]), None);
        let none: [&str; 0] = [];
        assert_eq!(parse_placement(&none), None);
    }
}
