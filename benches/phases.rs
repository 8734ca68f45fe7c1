//! In-process timings of each pipeline stage (load, import, export, save) on the models given
//! as arguments: `cargo bench --bench phases -- MODEL...`. Best of 5 runs per stage.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let models: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    if models.is_empty() {
        eprintln!("usage: cargo bench --bench phases -- MODEL.onnx...");
        return;
    }
    let dir = std::env::temp_dir().join(format!("onnx-safeify-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    for p in &models {
        let mut best = [Duration::MAX; 4];
        for _ in 0..5 {
            let out = dir.join("out.onnx");
            let _ = std::fs::remove_file(&out);
            let t = run(p, &out);
            for i in 0..4 {
                best[i] = best[i].min(t[i]);
            }
        }
        let total: Duration = best.iter().sum();
        println!(
            "{}: load {:.1} ms, import {:.1} ms, export {:.1} ms, save {:.1} ms, total {:.1} ms",
            p.display(),
            ms(best[0]),
            ms(best[1]),
            ms(best[2]),
            ms(best[3]),
            ms(total)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run(p: &Path, out: &Path) -> [Duration; 4] {
    let t0 = Instant::now();
    // As `onnx_safeify::load` does: the main graph's nodes are decoded by the importer.
    let (mut src, encoded) = onnx_safeify::io::load::load_model_split(p).expect("load");
    let t1 = Instant::now();
    let proto = std::mem::take(&mut src.proto);
    let model = onnx_safeify::import::import_model_split(proto, &encoded, Some(&src.external))
        .expect("import");
    let t2 = Instant::now();
    let exported = onnx_safeify::export::export_model(&model);
    let t3 = Instant::now();
    let sources = vec![onnx_safeify::io::save::Source::new(
        src.bytes.clone(),
        p.to_path_buf(),
    )];
    onnx_safeify::io::save_model(
        exported,
        out,
        Some(&src.external),
        sources,
        &Default::default(),
    )
    .expect("save");
    let t4 = Instant::now();
    [t1 - t0, t2 - t1, t3 - t2, t4 - t3]
}
