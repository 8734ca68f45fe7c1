//! Partitioned models: a chain of segment models described by a manifest.
//!
//! ```yaml
//! # manifest.yaml (or manifest.yml / manifest.json) beside the segment files
//! segments:
//!   - file: seg0.onnx      # path relative to the manifest's folder
//!     device: gpu          # cpu | gpu: where the segment is meant to run (verify runs all on CPU)
//!     inputs: [x]          # tensor names it takes (default: all its graph inputs)
//!     outputs: [t0, t1]    # tensor names it gives (default: all its graph outputs)
//!   - file: seg1.onnx
//!     device: cpu
//!     inputs: [t0, t1]
//!     outputs: [y]
//! outputs: [y]             # optional: the chain's final outputs (default: the last segment's)
//! ```
//!
//! Segments run in order. Each takes its inputs by name from the chain's inputs and the
//! outputs of earlier segments, and adds its outputs to that pool.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::runtime::run::error::VerifyError;
use crate::runtime::run::model::{load_model_info, IndexBound, ModelInfo, ValueKind, ValueSpec};

/// Manifest file names looked for in a folder, in order.
pub const MANIFEST_NAMES: [&str; 3] = ["manifest.yaml", "manifest.yml", "manifest.json"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cpu,
    Gpu,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    pub segments: Vec<SegmentEntry>,
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentEntry {
    pub file: PathBuf,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub device: Option<Device>,
    #[serde(default)]
    pub inputs: Option<Vec<String>>,
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub info: ModelInfo,
    pub device: Option<Device>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub manifest: PathBuf,
    pub segments: Vec<Segment>,
    /// The chain seen as one model: its external inputs and final outputs.
    pub info: ModelInfo,
}

/// The manifest `path` stands for: a manifest file itself, or one in a folder.
pub fn manifest_path(path: &Path) -> Result<Option<PathBuf>, VerifyError> {
    if path.is_dir() {
        for n in MANIFEST_NAMES {
            let p = path.join(n);
            if p.is_file() {
                return Ok(Some(p));
            }
        }
        return Err(VerifyError::manifest(
            path,
            format!(
                "is a folder without a partition manifest ({})",
                MANIFEST_NAMES.join(", ")
            ),
        ));
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    Ok(match ext.as_deref() {
        Some("yaml" | "yml" | "json") => Some(path.to_path_buf()),
        _ => None,
    })
}

/// Parses a manifest (YAML; JSON is accepted as YAML).
pub fn parse_manifest(path: &Path, text: &str) -> Result<ManifestFile, VerifyError> {
    serde_saphyr::from_str(text).map_err(|e| {
        // serde-saphyr renders a snippet over several lines; an error here is its first line.
        let msg = e.to_string();
        let first = msg
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("");
        let first = first.strip_prefix("error: ").unwrap_or(first);
        VerifyError::manifest(path, first.to_string())
    })
}

/// Loads a manifest and the segment models it names, checking that the chain is complete.
pub fn load_pipeline(path: &Path) -> Result<Pipeline, VerifyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| VerifyError::manifest(path, format!("cannot read: {e}")))?;
    let file = parse_manifest(path, &text)?;
    if file.segments.is_empty() {
        return Err(VerifyError::manifest(path, "lists no segments"));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let mut segments = Vec::with_capacity(file.segments.len());
    // tensor name -> (segment index, its spec) for everything produced so far
    let mut produced: HashMap<String, (usize, ValueSpec)> = HashMap::new();
    let mut external: Vec<ValueSpec> = Vec::new();
    let mut external_bounds: HashMap<String, Vec<IndexBound>> = HashMap::new();
    let mut scale_inputs: Vec<String> = Vec::new();
    let mut roles: HashMap<String, crate::runtime::run::model::InputRole> = HashMap::new();
    for (i, entry) in file.segments.iter().enumerate() {
        let label = entry
            .name
            .clone()
            .unwrap_or_else(|| format!("segment {i} ({})", entry.file.display()));
        let seg_path = base.join(&entry.file);
        let info = load_model_info(&seg_path)?;
        let inputs = match &entry.inputs {
            Some(list) => {
                for n in list {
                    if info.input(n).is_none() {
                        return Err(VerifyError::manifest(
                            path,
                            format!("{label}: '{n}' is not an input of {}", seg_path.display()),
                        ));
                    }
                }
                for spec in &info.inputs {
                    if !list.contains(&spec.name) {
                        return Err(VerifyError::manifest(
                            path,
                            format!(
                                "{label}: {} needs input '{}', which the manifest does not list",
                                seg_path.display(),
                                spec.name
                            ),
                        ));
                    }
                }
                list.clone()
            }
            None => info.inputs.iter().map(|v| v.name.clone()).collect(),
        };
        let outputs = match &entry.outputs {
            Some(list) => {
                for n in list {
                    if info.output(n).is_none() {
                        return Err(VerifyError::manifest(
                            path,
                            format!("{label}: '{n}' is not an output of {}", seg_path.display()),
                        ));
                    }
                }
                list.clone()
            }
            None => info.outputs.iter().map(|v| v.name.clone()).collect(),
        };
        for n in &inputs {
            if produced.contains_key(n) || external.iter().any(|v| &v.name == n) {
                continue;
            }
            if let Some(spec) = info.input(n) {
                external.push(spec.clone());
            }
            if info.scale_inputs.contains(n) {
                scale_inputs.push(n.clone());
            }
            if let Some(r) = info.roles.get(n) {
                let _ = roles.entry(n.clone()).or_insert(*r);
            }
            if let Some(b) = info.index_bounds.get(n) {
                external_bounds
                    .entry(n.clone())
                    .or_default()
                    .extend(b.iter().cloned());
            }
        }
        for n in &outputs {
            if let Some((j, _)) = produced.get(n) {
                return Err(VerifyError::manifest(
                    path,
                    format!("{label}: tensor '{n}' is already produced by segment {j}"),
                ));
            }
            let spec = info.output(n).cloned().unwrap_or(ValueSpec {
                name: n.clone(),
                kind: ValueKind::Other("an undeclared value".into()),
            });
            let _ = produced.insert(n.clone(), (i, spec));
        }
        segments.push(Segment {
            info,
            device: entry.device,
            inputs,
            outputs,
        });
    }
    let final_outputs = match &file.outputs {
        Some(list) => list.clone(),
        None => segments
            .last()
            .map(|s| s.outputs.clone())
            .unwrap_or_default(),
    };
    let mut outputs = Vec::with_capacity(final_outputs.len());
    let mut seen = HashSet::new();
    for n in &final_outputs {
        let Some((_, spec)) = produced.get(n) else {
            return Err(VerifyError::manifest(
                path,
                format!("output '{n}' is produced by no segment"),
            ));
        };
        if seen.insert(n.clone()) {
            outputs.push(spec.clone());
        }
    }
    if outputs.is_empty() {
        return Err(VerifyError::manifest(path, "the chain has no outputs"));
    }
    // Index bounds that point at a segment's own input axes stay meaningful only for
    // external inputs; others become unknown.
    let external_names: HashSet<&str> = external.iter().map(|v| v.name.as_str()).collect();
    for bounds in external_bounds.values_mut() {
        for b in bounds.iter_mut() {
            if let IndexBound::InputAxis { input, .. } = b {
                if !external_names.contains(input.as_str()) {
                    *b = IndexBound::Unknown;
                }
            }
        }
    }
    let info = ModelInfo {
        path: path.to_path_buf(),
        inputs: external,
        outputs,
        layer_annotations: Vec::new(),
        index_bounds: external_bounds,
        scale_inputs,
        roles,
        exactness: chain_exactness(&segments),
    };
    Ok(Pipeline {
        manifest: path.to_path_buf(),
        segments,
        info,
    })
}

/// The chain's exactness entry: the loosest class its segments record, or the first entry
/// that cannot be read (so that `verify` says so); none when no segment has one.
fn chain_exactness(segments: &[Segment]) -> Option<String> {
    use crate::rewrite::exactness::Exactness;
    let mut loosest: Option<Exactness> = None;
    for seg in segments {
        let Some(raw) = &seg.info.exactness else {
            continue;
        };
        match Exactness::from_meta(raw) {
            Some(c) => loosest = Some(loosest.map_or(c, |l| l.max(c))),
            None => return Some(raw.clone()),
        }
    }
    loosest.map(|c| c.to_meta())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_parses_flow_and_block_yaml() {
        let p = Path::new("m.yaml");
        let m = parse_manifest(
            p,
            "segments: [{file: seg0.onnx, device: gpu, inputs: [x], outputs: [t]}, {file: seg1.onnx, device: cpu}]",
        )
        .unwrap();
        assert_eq!(m.segments.len(), 2);
        assert_eq!(m.segments[0].device, Some(Device::Gpu));
        assert_eq!(m.segments[1].inputs, None);
        let m = parse_manifest(
            p,
            "segments:\n  - file: a.onnx\n    outputs: [y]\noutputs: [y]\n",
        )
        .unwrap();
        assert_eq!(m.outputs, Some(vec!["y".to_string()]));
    }

    #[test]
    fn manifest_errors_are_one_line_with_position() {
        let p = Path::new("m.yaml");
        let e = parse_manifest(p, "segments:\n  - file: a.onnx\n    devise: gpu\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.yaml: line"), "{e}");
        assert!(e.contains("devise"), "{e}");
        assert!(!e.contains('\n'));
        let e = parse_manifest(p, "segments:\n  - file: a.onnx\n    device: tpu\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tpu"), "{e}");
    }
}
