//! Resolving an ambiguous NCHWc block size by running the candidates.
//!
//! A model that ONNX Runtime saved at optimization level `all` may hold NCHWc regions
//! (`com.microsoft.nchwc`): tensors and filters blocked by the vector width of the CPU that saved
//! it (`MlasNchwcGetBlockSize`: 8 with AVX2, 16 with AVX-512). The shapes often pin the block size
//! down (see [`crate::rewrite::unfuse::nchwc::fitting_block_sizes`]); when several sizes fit and
//! `--nchwc-block` was not given, [`resolve`] compiles the model once per candidate and keeps the
//! candidate whose output reproduces the model's own outputs on this machine's ONNX Runtime CPU
//! provider. Such a model computes correctly only on a CPU with its own block size, so the model
//! run here is the reference, and a wrong size (filters unblocked in the wrong order) shows up as
//! a mismatch.
//!
//! When no candidate reproduces the outputs, or ONNX Runtime cannot be loaded, nothing is decided:
//! the compile goes on without a block size, the region is refused whole and the fallback applies
//! (the CPU for the built-in GPU targets), and the report says why.

use std::path::PathBuf;

use crate::engine::{self, Options};
use crate::rewrite::unfuse::{nchwc, NCHWC_DOMAIN};
use crate::rules::schema::Target;
use crate::verify::{self, VerifyError, VerifyOptions};
use crate::Document;

/// What [`resolve`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// The block size to compile with; `None`: not resolved (the region falls back).
    pub block: Option<i64>,
    /// The sizes that fit the model's shapes.
    pub candidates: Vec<i64>,
    /// The candidates whose output reproduced the model's outputs.
    pub reproduced: Vec<i64>,
    /// One line for the report.
    pub note: String,
}

/// The block sizes that fit `doc`'s NCHWc nodes when more than one does (an empty list when
/// the model has no NCHWc node or its shapes decide the size).
pub fn ambiguous_sizes(doc: &Document) -> Vec<i64> {
    let g = &doc.model.graph;
    if !g.order.iter().any(|&n| g.node(n).domain() == NCHWC_DOMAIN) {
        return Vec::new();
    }
    let facts = crate::infer::infer_model(&doc.model, &Default::default());
    let (sizes, _) = nchwc::fitting_block_sizes(g, &facts, None);
    if sizes.len() > 1 {
        sizes
    } else {
        Vec::new()
    }
}

/// A folder removed (with what is in it) when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "onnx-safeify-nchwc-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Resolve the block size of `doc` for a compile under `target` with `opts`, when
/// `opts.nchwc_block` is unset and the model's shapes leave several sizes. `None`: nothing to
/// resolve (no NCHWc region, a size given or decided by the shapes, or a target that compiles
/// the model the same way whatever the size).
pub fn resolve(doc: &mut Document, target: &Target, opts: &Options) -> Option<Resolution> {
    if opts.nchwc_block.is_some() {
        return None;
    }
    let candidates = ambiguous_sizes(doc);
    if candidates.is_empty() {
        return None;
    }
    let unresolved = |note: String, reproduced: Vec<i64>| Resolution {
        block: None,
        candidates: candidates.clone(),
        reproduced,
        note,
    };
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(e) => {
            return Some(unresolved(
                format!(
                    "NCHWc block size ambiguous ({candidates:?} fit) and not resolved: cannot make a scratch folder ({e}); the NCHWc region stays on the CPU (give --nchwc-block N)"
                ),
                Vec::new(),
            ))
        }
    };
    // The model as loaded (the reference), then one compile per candidate.
    let original = scratch.0.join("original.onnx");
    if let Err(e) = crate::save(doc, &original) {
        return Some(unresolved(
            format!("NCHWc block size ambiguous ({candidates:?} fit) and not resolved: cannot write the reference model ({e}); the NCHWc region stays on the CPU (give --nchwc-block N)"),
            Vec::new(),
        ));
    }
    let mut compiled: Vec<(i64, PathBuf)> = Vec::new();
    let mut first_bytes: Option<Vec<u8>> = None;
    let mut all_same = true;
    for &b in &candidates {
        let mut candidate = doc.model.clone();
        let o = Options {
            nchwc_block: Some(b),
            ..opts.clone()
        };
        engine::compile(&mut candidate, target, &o);
        // A candidate whose region was not decomposed (refused, and left to the fallback)
        // would reproduce the outputs trivially: only decomposed regions are tried.
        let g = &candidate.graph;
        let decomposed = !g.order.iter().any(|&n| g.node(n).domain() == NCHWC_DOMAIN);
        let mut bytes = Vec::new();
        if crate::io::save::write_model(&mut bytes, &crate::export::export_model(&candidate))
            .is_err()
        {
            continue;
        }
        match &first_bytes {
            None => first_bytes = Some(bytes),
            Some(f) => all_same &= *f == bytes,
        }
        if !decomposed {
            continue;
        }
        let path = scratch.0.join(format!("block{b}.onnx"));
        let kept = std::mem::replace(&mut doc.model, candidate);
        let saved = crate::save(doc, &path);
        doc.model = kept;
        if saved.is_ok() {
            compiled.push((b, path));
        }
    }
    if all_same {
        // The target's rules leave the NCHWc region alone: the size makes no difference.
        return None;
    }
    let vopts = VerifyOptions {
        runs: 2,
        seed: 20261130,
        ..VerifyOptions::default()
    };
    let mut reproduced = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for (b, path) in &compiled {
        match verify::verify_models(&original, path, &vopts) {
            Ok(r) if r.passed() => reproduced.push(*b),
            Ok(_) => {}
            Err(e @ (VerifyError::RuntimeNotFound(_) | VerifyError::RuntimeLoad { .. })) => {
                return Some(unresolved(
                    format!(
                        "NCHWc block size ambiguous ({candidates:?} fit) and not resolved: ONNX Runtime is needed to try them ({}); the NCHWc region stays on the CPU (give --nchwc-block N)",
                        first_line(&e.to_string())
                    ),
                    Vec::new(),
                ));
            }
            Err(e) => errors.push(format!("{b}: {}", first_line(&e.to_string()))),
        }
    }
    Some(match reproduced.as_slice() {
        [b] => Resolution {
            block: Some(*b),
            candidates: candidates.clone(),
            reproduced: reproduced.clone(),
            note: format!(
                "NCHWc block size {b}: of the sizes that fit ({candidates:?}), only {b} reproduced the model's outputs on this machine's ONNX Runtime CPU"
            ),
        },
        [] => unresolved(
            format!(
                "NCHWc block size ambiguous ({candidates:?} fit) and not resolved: no candidate reproduced the model's outputs on this machine's ONNX Runtime CPU{}; the NCHWc region stays on the CPU (give --nchwc-block N)",
                if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) }
            ),
            reproduced,
        ),
        many => unresolved(
            format!(
                "NCHWc block size ambiguous ({candidates:?} fit) and not resolved: {many:?} all reproduced the model's outputs on this machine's ONNX Runtime CPU; the NCHWc region stays on the CPU (give --nchwc-block N)"
            ),
            reproduced.clone(),
        ),
    })
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
