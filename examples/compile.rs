//! Compile a model for a target from Rust, the way the `onnx-safeify` command does.
//!
//! ```sh
//! cargo run --example compile -- samples/ocr_tiny.onnx rx580 /tmp/ocr_tiny.rx580.onnx
//! ```
//!
//! Exit code 0: written; 1: some node has no safe rewrite (nothing written); 2: an error.

use std::path::PathBuf;
use std::process::ExitCode;

use onnx_safeify::engine::{self, FindingKind};
use onnx_safeify::{report, rules, Error, ErrorKind};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, target, out] = args.as_slice() else {
        eprintln!("usage: compile MODEL TARGET OUT   (TARGET: a built-in name or FILE.yaml)");
        return ExitCode::from(2);
    };
    match run(PathBuf::from(model), target, PathBuf::from(out)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(model: PathBuf, target: &str, out: PathBuf) -> Result<u8, Error> {
    // A built-in target name (`none`, `directml`, `rx580`) or a rules file, with its bases.
    let target = rules::load_target(target)?;
    let opts = engine::Options::default();

    // Load (memory-mapped, validated) and rewrite in place.
    let mut doc = onnx_safeify::load(&model)?;
    let result = engine::compile(&mut doc.model, &target, &opts);

    // Refuse to write a model that is still unsafe, as the command does without --allow-unsafe.
    let model_name = model.display().to_string();
    let blocking = result
        .remaining
        .iter()
        .filter(|f| matches!(f.kind, FindingKind::Denied | FindingKind::Unsupported))
        .count();
    if blocking > 0 {
        eprint!(
            "{}",
            report::findings_text(&target.name, &model_name, &result.remaining)
        );
        eprintln!(
            "{blocking} node(s) have no safe rewrite for {}; nothing written",
            target.name
        );
        return Ok(1);
    }

    // Never write a broken graph; carry the runtime settings in the model's metadata.
    engine::check_invariants(&doc.model.graph)
        .map_err(|e| Error::new(ErrorKind::Invalid, format!("internal error: {e}")))?;
    if !target.runtime.is_empty() {
        engine::stamp_runtime(&mut doc.model, &target);
    }
    let saved = onnx_safeify::save(&doc, &out)?;

    print!("{}", report::summary_text(&result, &target));
    if !result.remaining.is_empty() {
        print!(
            "{}",
            report::findings_text(&target.name, &model_name, &result.remaining)
        );
    }
    println!("wrote {} ({} bytes)", saved.path.display(), saved.bytes);
    Ok(0)
}
