//! Structure-aware fuzzing of rules inside bodies and of fallbacks: random models whose main
//! graph and If / Loop bodies (nested up to two deep) hold depthwise convolutions (some wide
//! enough to be split), com.microsoft FusedConv and Inverse (no decomposition: a fallback) nodes,
//! and reads of outer-scope values (also of
//! values a rewrite replaces), compiled for every built-in target.
//!
//! Each case must: not panic; compile to a writable model (every built-in target falls back
//! rather than refusing); pass the graph invariants; check clean for its target; compile again
//! to the same bytes (a compiled model is a fixed point); and, when ONNX Runtime is found, equal
//! the original on its CPU provider over runs whose random `cond` inputs take both branches.
//!
//! ```sh
//! cargo run --release --example fuzz_bodies -- [--seconds 600] [--seed N] [--targets a,b]
//!     [--save DIR] [--no-ort]
//! cargo run --release --example fuzz_bodies -- --write DIR SEED...   # the models of these seeds
//! ```
//! A failing case is written to `--save` (default `fuzz/work/bodies`) as `<seed>.onnx`, to be
//! kept under `tests/data/fuzz/bodies/` (replayed by `tests/fuzz_regressions.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "../fuzz/src/bodies.rs"]
mod bodies;

use bodies::{check_case, Case, Outcome};

fn main() {
    let mut seconds = 60u64;
    let mut seed = 1u64;
    let mut targets: Option<Vec<String>> = None;
    let mut save = PathBuf::from("fuzz/work/bodies");
    let mut ort = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|v| v.parse().ok()).unwrap_or(60),
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            "--targets" => {
                targets = args
                    .next()
                    .map(|v| v.split(',').map(str::to_string).collect())
            }
            "--save" => save = args.next().map(PathBuf::from).unwrap_or(save),
            "--no-ort" => ort = false,
            // Write the models of these seeds to DIR and stop (to keep cases as regressions).
            "--write" => {
                let dir = PathBuf::from(args.next().unwrap_or_default());
                let _ = std::fs::create_dir_all(&dir);
                for s in args.by_ref() {
                    let s: u64 = s.parse().unwrap_or(0);
                    let _ = std::fs::write(
                        dir.join(format!("seed{s}.onnx")),
                        Case::generate(s).bytes(),
                    );
                }
                return;
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let targets: Vec<String> = targets.unwrap_or_else(|| {
        onnx_safeify::rules::builtin_names()
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut cases, mut compiles, mut verified, mut failures) = (0u64, 0u64, 0u64, 0u64);
    let mut per_target = vec![Duration::ZERO; targets.len()];
    while Instant::now() < deadline {
        let case = Case::generate(seed);
        for (i, t) in targets.iter().enumerate() {
            let started = Instant::now();
            let outcome = check_case(&case, t, ort);
            per_target[i] += started.elapsed();
            compiles += 1;
            match outcome {
                Outcome::Passed { verified: v } => verified += v as u64,
                Outcome::Failed(why) => {
                    failures += 1;
                    let _ = std::fs::create_dir_all(&save);
                    let path = save.join(format!("{seed}.{t}.onnx"));
                    let _ = std::fs::write(&path, case.bytes());
                    eprintln!("seed {seed} target {t}: {why}\n  saved {}", path.display());
                }
            }
        }
        cases += 1;
        seed = seed.wrapping_add(1);
    }
    let times: Vec<String> = targets
        .iter()
        .zip(&per_target)
        .map(|(t, d)| format!("{t} {:.1}s", d.as_secs_f64()))
        .collect();
    println!(
        "{cases} models, {compiles} compiles, {verified} verified on ONNX Runtime, {failures} failures; next seed {seed}; time per target: {}",
        times.join(", ")
    );
    if failures > 0 {
        std::process::exit(1);
    }
}
