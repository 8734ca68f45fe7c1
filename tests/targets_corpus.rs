//! Every built-in target on the shipped sample and the PP-OCR corpus models (real and ONNX
//! Runtime-optimised): the CLI compiles each model, the output passes the target's own `check`
//! (exit 0), compiling the output again gives the same bytes, and the output computes what the
//! original does on ONNX Runtime (`verify_models`; PP-OCR det on a synthetic page of text, rec
//! at height 48). Each target's `--report` JSON on PP-OCRv4 det is an insta snapshot.
//!
//! Outputs whose graph differs from the original only in metadata (runtime settings, rule
//! stamps) compute the same function by construction; that is asserted on the decoded graphs
//! instead of being run. Every other distinct graph is run once, and so is one output per
//! model whose nodes are pinned to the CPU (verify runs it with the layer assignment).

mod common;
mod verify_support;

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use onnx_safeify::proto::{GraphProto, ModelProto};
use onnx_safeify::verify::inputs::DimOverrides;
use onnx_safeify::verify::{verify_models, VerifyOptions};
use prost::Message;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sample,
    Det,
    Rec,
    Cls,
}

struct Model {
    label: String,
    path: PathBuf,
    kind: Kind,
}

/// The shipped sample, then the corpus OCR models; `None` when the corpus is missing and that
/// is allowed.
fn models() -> Option<Vec<Model>> {
    let corpus = common::corpus()?;
    let mut out = vec![Model {
        label: "ocr_tiny".into(),
        path: common::sample(),
        kind: Kind::Sample,
    }];
    for sub in ["real", "ort_optimized"] {
        for p in common::onnx_files(&corpus.join(sub)) {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let kind = if name.contains("_det_") {
                Kind::Det
            } else if name.contains("_rec_") {
                Kind::Rec
            } else if name.contains("_cls_") {
                Kind::Cls
            } else {
                continue;
            };
            let label = name.replace("rapidocr_onnxruntime__", "");
            out.push(Model {
                label,
                path: p,
                kind,
            });
        }
    }
    assert_eq!(
        out.len(),
        13,
        "the sample, 3 real and 9 ORT-optimised PP-OCR models"
    );
    Some(out)
}

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .output()
        .expect("the binary runs")
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

fn strip_graph(g: &mut GraphProto) {
    for n in &mut g.node {
        n.metadata_props.clear();
        for a in &mut n.attribute {
            if let Some(sg) = a.g.as_mut() {
                strip_graph(sg);
            }
            for sg in &mut a.graphs {
                strip_graph(sg);
            }
        }
    }
}

/// A hash of the model with every metadata entry removed (model and nodes): two models with
/// the same hash differ at most in metadata, which ONNX Runtime's CPU provider ignores.
fn math_key(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    m.metadata_props.clear();
    if let Some(g) = m.graph.as_mut() {
        strip_graph(g);
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.encode_to_vec().hash(&mut h);
    h.finish()
}

/// (model label, math key, has pinned nodes) already run on ONNX Runtime, shared by the
/// per-target tests.
static VERIFIED: Mutex<Option<HashSet<(String, u64, bool)>>> = Mutex::new(None);

fn first_time(label: &str, key: u64, pinned: bool) -> bool {
    let mut v = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
    v.get_or_insert_with(HashSet::new)
        .insert((label.to_string(), key, pinned))
}

fn verify(m: &Model, out: &Path, dir: &Path) -> String {
    let mut opts = VerifyOptions::default();
    match m.kind {
        // PP-OCR det on noise outputs ~0 everywhere; a page of text gives a real map.
        Kind::Det => opts.inputs = Some(verify_support::text_page_npz(dir, 96, 96, 7)),
        // The recogniser's height is 48 (its width is free); the classifier takes 48x192.
        Kind::Rec => {
            opts.dims = DimOverrides::parse(&["x[2]=48".into(), "x[3]=160".into()]).unwrap()
        }
        Kind::Cls => {
            opts.dims = DimOverrides::parse(&["x[2]=48".into(), "x[3]=192".into()]).unwrap()
        }
        Kind::Sample => {}
    }
    let report = verify_models(&m.path, out, &opts)
        .unwrap_or_else(|e| panic!("{}: verify failed to run: {e}", m.label));
    assert!(report.passed(), "{}:\n{}", m.label, report.to_text());
    assert!(
        report.warnings.is_empty(),
        "{}: {:?}",
        m.label,
        report.warnings
    );
    report.to_text()
}

/// The report JSON with this machine's folders replaced by placeholders.
fn portable_report(json: &str, corpus: &Path, dir: &Path) -> String {
    json.replace(&dir.display().to_string(), "<out>")
        .replace(&corpus.display().to_string(), "<corpus>")
}

fn check_target(target: &str) {
    let Some(models) = models() else { return };
    if !verify_support::runtime_available() {
        return;
    }
    let corpus = common::corpus().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut summary: BTreeMap<String, String> = BTreeMap::new();
    for m in &models {
        let out = dir.path().join(format!("{}.{target}.onnx", m.label));
        let again = dir.path().join(format!("{}.{target}.again.onnx", m.label));
        let report = dir.path().join(format!("{}.{target}.json", m.label));

        let mut args = vec![
            os(&m.path),
            os("--target"),
            os(target),
            os("-o"),
            os(&out),
            os("--report"),
            os(&report),
        ];
        // The NCHWc block size of this machine, which made the corpus's ORT-optimised models
        // (a block-8 region can be ambiguous with 4; 16 with AVX-512).
        if m.label.contains("ort_all") {
            let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let block = if info.split_whitespace().any(|f| f == "avx512f") {
                "16"
            } else {
                "8"
            };
            args.push(os("--nchwc-block"));
            args.push(os(block));
        }
        // An NCHWc region (ONNX Runtime's level-all CPU layout) has only an approximate
        // standard form, and openvino-gpu cannot pin it to the CPU: refused by default (exit 1,
        // nothing written), compiled when approximations are allowed.
        if target == "openvino-gpu" && m.label.contains("ort_all") {
            let r = run(&args);
            let err = String::from_utf8_lossy(&r.stderr);
            assert_eq!(r.status.code(), Some(1), "{}: {err}", m.label);
            assert!(err.contains("approximate"), "{}: {err}", m.label);
            assert!(!out.exists(), "{}", m.label);
            args.push(os("--allow-approximate"));
        }
        let o = run(&args);
        assert!(
            o.status.success(),
            "{target} on {}: exit {:?}\n{}",
            m.label,
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );

        let c = run(&[os("check"), os(&out), os("--target"), os(target)]);
        assert_eq!(
            c.status.code(),
            Some(0),
            "{target}: check on the output for {} still finds something:\n{}",
            m.label,
            String::from_utf8_lossy(&c.stdout)
        );

        let o2 = run(&[
            os(&out),
            os("--target"),
            os(target),
            os("-o"),
            os(&again),
            os("--allow-approximate"),
        ]);
        assert!(
            o2.status.success(),
            "{target}: second compile of {}",
            m.label
        );
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&again).unwrap(),
            "{target}: compiling the output of {} again changed it",
            m.label
        );

        // Pinned nodes change no math but make ONNX Runtime place nodes by annotation: one
        // annotated output per model and graph is run too.
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        let pinned = json["pinned"].as_array().is_some_and(|p| !p.is_empty());
        let key = math_key(&out);
        let same = key == math_key(&m.path);
        let verdict = if same && !pinned {
            "same graph".to_string()
        } else if first_time(&m.label, key, pinned) {
            verify(m, &out, dir.path());
            "verified".to_string()
        } else {
            "verified (same graph as another target's)".to_string()
        };
        summary.insert(m.label.clone(), verdict);

        if m.label == "ch_PP-OCRv4_det_infer" {
            let json = std::fs::read_to_string(&report).unwrap();
            let json = portable_report(&json, &corpus, dir.path());
            insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
                insta::assert_snapshot!(format!("targets_report_det_{target}"), json);
            });
        }
    }
    eprintln!("{target}: {summary:#?}");
}

macro_rules! target_tests {
    ($($fn:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $fn() {
                check_target($name);
            }
        )*

        #[test]
        fn every_builtin_target_is_covered() {
            let mut tested = vec![$($name),*];
            tested.sort();
            let mut builtin = onnx_safeify::rules::builtin_names();
            builtin.sort();
            assert_eq!(tested, builtin);
        }
    };
}

target_tests! {
    none => "none",
    directml => "directml",
    rx580 => "rx580",
    intel_gen9 => "intel-gen9",
    intel_xe => "intel-xe",
    rdna2 => "rdna2",
    rocm_migraphx => "rocm-migraphx",
    openvino_gpu => "openvino-gpu",
    coreml => "coreml",
    webgpu => "webgpu",
    tensorrt => "tensorrt",
}
