//! What the fuzz targets do with one input, shared with `tests/fuzz_regressions.rs` (which
//! includes this file with `#[path]`), so that a kept crasher is replayed through exactly the
//! path that found it.
//!
//! Each entry point returns `Ok(())` when the input went all the way through, `Err(message)`
//! when the library refused it cleanly. It panics only when the library broke a promise: a
//! panic inside the library, or an oracle below that does not hold.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use prost::Message;

use onnx_safeify::engine::{self, Options};
use onnx_safeify::infer::{infer_model, InferOptions};
use onnx_safeify::io::external::ExternalData;
use onnx_safeify::io::load::decode_model;
use onnx_safeify::io::save::{write_model_planned, Plan};
use onnx_safeify::io::unknown::scan;
use onnx_safeify::rules::{self, MemFs, Target};
use onnx_safeify::{compile, export, import, inspect, ir, Model};

/// Models with more nodes than this are checked but not compiled (keeps one run short).
pub const COMPILE_MAX_NODES: usize = 256;

/// The separator line between the files of a `rules` input (see [`rules_input`]).
pub const FILE_SEPARATOR: &str = "\n#~~~\n";

/// The names a `rules` input's files are stored under, in order: the target, then files it may
/// extend (`./base.yaml`, `sub/mid.yaml`, `../up.yaml` from `sub/`...), the last one is layered
/// on top as a `--rules` file.
pub const RULE_FILES: [&str; 6] = [
    "t.yaml",
    "base.yaml",
    "sub/mid.yaml",
    "sub/leaf.yaml",
    "up.yaml",
    "over.yaml",
];

/// A folder with one small data file (`w.bin`, 4096 bytes) that external-data references in
/// fuzzed models may name.
fn external() -> &'static ExternalData {
    static EXT: OnceLock<ExternalData> = OnceLock::new();
    EXT.get_or_init(|| {
        let dir: PathBuf =
            std::env::temp_dir().join(format!("onnx-safeify-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        std::fs::write(dir.join("w.bin"), vec![7u8; 4096]).expect("temp data file");
        ExternalData::new(&dir.join("model.onnx")).expect("temp folder resolves")
    })
}

fn rx580() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| rules::load_target("rx580").expect("the built-in rx580 target loads"))
}

/// A target that rewrites as much as it can: rx580 plus small splits on every axis, CPU pins,
/// casts and a small barrier budget, so that small fuzzed models get rewritten too. Splits
/// only fire on small nodes, so one input makes at most a few dozen pieces.
pub const STRESS_TARGET: &str = "\
target: stress
extends: rx580
rules:
  - {id: split-grouped, why: fuzz, evidence: [], match: {op: Conv, grouped: true, channels: {gt: 2, le: 64}}, action: {split: {axis: channels, max: 2}}}
  - {id: split-out, why: fuzz, evidence: [], match: {op: [Conv, ConvTranspose], grouped: false, out_channels: {gt: 3, le: 96}}, action: {split: {axis: out_channels, max: 3}}}
  - {id: split-batch, why: fuzz, evidence: [], match: {op: Conv, batch: {gt: 1, le: 8}}, action: {split: {axis: batch, max: 1}}}
  - {id: pin, why: fuzz, evidence: [], match: {op: [Relu, Add, Concat, Resize, Reshape]}, action: cpu}
  - {id: cast-half, why: fuzz, evidence: [], match: {op: [Add, Mul, Conv, MatMul], any_input: {dtype: float16}}, action: {cast: {from: float16, to: float}}}
  - {id: barrier-small, why: fuzz, evidence: [], match: {op: [Conv, MatMul, Gemm, Add]}, action: {barrier: {budget: 1e4}}}
";

/// Whether [`model_input`] also compiles with [`STRESS_TARGET`]: yes, unless the environment
/// says `ONNX_SAFEIFY_FUZZ_STRESS=0`.
pub fn stress_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("ONNX_SAFEIFY_FUZZ_STRESS").as_deref() != Ok("0"))
}

fn stress() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| {
        rules::parse_target_str("stress.yaml", STRESS_TARGET).expect("the stress target loads")
    })
}

/// A fixed model that fuzzed rule files are matched against and compiled with: the PP-OCR
/// sample (depthwise and grouped convolutions, Resize, Concat, fused-free).
fn sample_model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let bytes = include_bytes!("../../samples/ocr_tiny.onnx");
        let proto = decode_model(Bytes::from_static(bytes)).expect("sample decodes");
        import::import_model(proto, None).expect("sample imports")
    })
}

/// Export and encode a model both ways (prost and the streaming writer); they must agree.
fn encode(m: &Model) -> Vec<u8> {
    let proto = export::export_model(m);
    let bytes = proto.encode_to_vec();
    let mut streamed: Vec<u8> = Vec::new();
    onnx_safeify::io::save::write_model(&mut streamed, &proto).expect("writing to memory");
    assert!(
        streamed == bytes,
        "write_model and prost encode disagree ({} vs {} bytes)",
        streamed.len(),
        bytes.len()
    );
    bytes
}

/// Target `model`: bytes → decode → import → infer → inspect/dump → export → encode, then:
/// the encoding decodes and imports again and exports to the same bytes; `engine::check` with
/// rx580; for small models `engine::compile` with rx580 and with [`STRESS_TARGET`], whose
/// results must satisfy the graph invariants, export and re-import cleanly.
pub fn model_input(data: &[u8]) -> Result<(), String> {
    model_input_with(data, stress_enabled())
}

/// [`model_input`], compiling with [`STRESS_TARGET`] or not.
pub fn model_input_with(data: &[u8], stress_compile: bool) -> Result<(), String> {
    let proto = decode_model(Bytes::copy_from_slice(data)).map_err(|e| e.to_string())?;
    let ext = external();
    let mut model = import::import_model(proto, Some(ext)).map_err(|e| e.to_string())?;

    let _facts = infer_model(&model, &InferOptions::default());
    let summary = inspect::summarize(&model);
    let _ = inspect::render_text(&summary);
    let _ = ir::dump::dump_model(&model);

    // Round trip: what was imported exports to a model that imports again, and to the same
    // bytes the second time.
    let first = encode(&model);
    let again = decode_model(Bytes::from(first.clone()))
        .unwrap_or_else(|e| panic!("an exported model does not decode: {e}"));
    let model2 = import::import_model(again, Some(ext))
        .unwrap_or_else(|e| panic!("an exported model does not import: {e}"));
    let second = encode(&model2);
    assert!(first == second, "export is not stable across a round trip");

    let opts = Options::default();
    let _findings = engine::check(&mut model, rx580(), &opts);
    if model.graph.node_count() <= COMPILE_MAX_NODES {
        let mut stressed = stress_compile.then(|| model.clone());
        compile_and_check(&mut model, rx580(), &opts, ext);
        if let Some(m) = stressed.as_mut() {
            compile_and_check(m, stress(), &opts, ext);
        }
    }
    Ok(())
}

/// Compile, then require the invariants, and a clean export/re-import of the result.
fn compile_and_check(model: &mut Model, target: &Target, opts: &Options, ext: &ExternalData) {
    let _report = engine::compile(model, target, opts);
    if let Err(e) = engine::check_invariants(&model.graph) {
        panic!("compile broke a graph invariant: {e}");
    }
    let out = encode(model);
    let back = decode_model(Bytes::from(out))
        .unwrap_or_else(|e| panic!("a compiled model does not decode: {e}"));
    if let Err(e) = import::import_model(back, Some(ext)) {
        panic!("a compiled model does not import: {e}");
    }
    let _ = engine::check(model, target, opts);
}

/// The (number, wire type, bytes) of every unknown field `scan` finds, sorted; with paths when
/// `paths`.
fn unknown_fields(bytes: &Bytes, paths: bool) -> Vec<(String, u32, u8, Vec<u8>)> {
    let carry = scan(bytes).unwrap_or_else(|e| panic!("the scan refuses a written model: {e}"));
    let mut v: Vec<_> = carry
        .list()
        .into_iter()
        .map(|f| {
            let path = if paths { f.path.clone() } else { String::new() };
            (
                path,
                f.number,
                f.wire_type,
                bytes[f.offset..f.offset + f.len].to_vec(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Target `unknown`: fields the schema does not define. The wire-level scan accepts every model
/// prost decodes (and refuses the rest cleanly); every field it reports lies where it says,
/// starting with its own key. An untouched model comes back byte for byte; the writer's own
/// placement of the carried fields on the unchanged model drops none, invents none, and what
/// it writes decodes to the same message; a compile with rx580 either keeps every one of them
/// or refuses, naming them.
pub fn unknown_input(data: &[u8]) -> Result<(), String> {
    let bytes = Bytes::copy_from_slice(data);
    let scanned = scan(&bytes);
    let decoded = decode_model(bytes.clone());
    if let (Ok(_), Err(e)) = (&decoded, &scanned) {
        panic!("prost decodes the model but the scan refuses it: {e}");
    }
    let carry = scanned.map_err(|e| e.to_string())?;
    let input_proto = decoded.map_err(|e| e.to_string())?;
    for f in carry.list() {
        // The key may be a non-minimal varint: compare its value.
        let mut field = &data[f.offset..f.offset + f.len];
        let key = prost::encoding::decode_varint(&mut field)
            .unwrap_or_else(|e| panic!("{f} does not start with a key: {e}"));
        assert_eq!(
            key,
            (u64::from(f.number) << 3) | u64::from(f.wire_type),
            "{f} does not start with its key"
        );
    }

    let name = external().base().join("model.onnx");
    let doc = onnx_safeify::load_bytes(bytes.clone(), &name).map_err(|e| e.to_string())?;
    let proto = export::export_model(&doc.model);
    let external_data = onnx_safeify::io::save::has_external(&proto);
    match compile::model_bytes(&doc) {
        Ok(out) => {
            if !carry.is_empty() && proto == input_proto {
                assert!(
                    out == data,
                    "an untouched model with unknown fields changed"
                );
            }
        }
        Err(e) => assert!(
            external_data || e.message.contains("would be dropped"),
            "model_bytes failed: {e}"
        ),
    }

    let carried = doc.source.unknown().map_err(|e| e.to_string())?;
    match Plan::new(&proto, &carried) {
        Ok(plan) => {
            let mut out = Vec::new();
            write_model_planned(&mut out, &proto, &plan).expect("writing to memory");
            let out = Bytes::from(out);
            let back = decode_model(out.clone()).unwrap_or_else(|e| {
                panic!("a model written with unknown fields does not decode: {e}")
            });
            // Compared encoded: a NaN in `float_data` is never equal to itself.
            assert!(
                back.encode_to_vec() == proto.encode_to_vec(),
                "unknown fields changed what prost decodes"
            );
            let same = proto == input_proto;
            assert_eq!(
                unknown_fields(&out, same),
                unknown_fields(&bytes, same),
                "the written model does not hold the input's unknown fields"
            );
        }
        // Only a field in a message the decoder replaced (a oneof's other member) has no place.
        Err(e) => assert!(e.message.contains("would be dropped"), "{e}"),
    }

    if doc.model.graph.node_count() <= COMPILE_MAX_NODES && !carry.is_empty() {
        let mut doc = onnx_safeify::load_bytes(bytes.clone(), &name).map_err(|e| e.to_string())?;
        let done = compile::compile_document(&mut doc, rx580(), &Options::default(), true, &name);
        match done {
            Ok(_) => {
                if let Ok(out) = compile::model_bytes(&doc) {
                    let out = Bytes::from(out);
                    decode_model(out.clone())
                        .unwrap_or_else(|e| panic!("a compiled model does not decode: {e}"));
                    assert_eq!(
                        unknown_fields(&out, false),
                        unknown_fields(&bytes, false),
                        "a compile lost or invented unknown fields"
                    );
                }
            }
            Err(e) => {
                if e.message.contains("would be dropped") {
                    assert!(e.message.contains(" field "), "{e}");
                }
            }
        }
    }
    Ok(())
}

/// Split a `rules` input into its files: text separated by [`FILE_SEPARATOR`] lines, stored
/// under the names of [`RULE_FILES`] (extra parts are appended to the last file).
pub fn rule_files(text: &str) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for (i, part) in text.split(FILE_SEPARATOR).enumerate() {
        if i < RULE_FILES.len() {
            out.push((RULE_FILES[i], part.to_string()));
        } else if let Some(last) = out.last_mut() {
            last.1.push_str(FILE_SEPARATOR);
            last.1.push_str(part);
        }
    }
    out
}

/// Target `rules`: the text (lossy UTF-8) as one target file (`parse_target_str`), then split
/// into files of a [`MemFs`] and loaded as `t.yaml` with `extends` chains, the sixth part
/// layered as a `--rules` file. Every target that loads is matched against the sample model
/// (`engine::check`, `explain` on its first nodes) and, for one in four inputs, compiled.
pub fn rules_input(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let mut loaded: Vec<Target> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    match rules::parse_target_str("fuzz.yaml", &text) {
        Ok(t) => loaded.push(t),
        Err(e) => errors.push(e.to_string()),
    }
    let files = rule_files(&text);
    if files.len() > 1 {
        let mut fs = MemFs::new();
        for (name, body) in &files {
            fs = fs.with(name, body);
        }
        let overlays: Vec<PathBuf> = if files.len() == RULE_FILES.len() {
            vec![PathBuf::from(RULE_FILES[RULE_FILES.len() - 1])]
        } else {
            Vec::new()
        };
        match rules::load_target_from(&fs, RULE_FILES[0], &overlays) {
            Ok(t) => loaded.push(t),
            Err(e) => errors.push(e.to_string()),
        }
    }
    for t in &loaded {
        exercise_target(t, data.first().copied().unwrap_or(0) % 4 == 0);
    }
    if loaded.is_empty() {
        Err(errors.join("\n"))
    } else {
        Ok(())
    }
}

/// Match a loaded target against the sample model; optionally compile with it.
fn exercise_target(target: &Target, compile: bool) {
    let _ = format!("{target:?}");
    let mut model = sample_model().clone();
    let opts = Options {
        max_iterations: 4,
        ..Options::default()
    };
    let _ = engine::check(&mut model, target, &opts);
    {
        let facts = infer_model(&model, &InferOptions::default());
        let opsets = rules::Opsets::from_model(&model);
        for &n in model.graph.order.iter().take(3) {
            let _ = rules::explain(target, &model.graph, &facts, &opsets, n);
        }
    }
    if compile {
        compile_and_check(&mut model, target, &opts, external());
    }
}

/// Target `tensors`: the readers of `verify`'s input and expected-output files: the bytes as an
/// `.npy` array, as a serialized `TensorProto` (`input_0.pb`), and (when they are a zip) as an
/// `.npz` archive.
pub fn tensors_input(data: &[u8]) -> Result<(), String> {
    use onnx_safeify::runtime::run::npz;
    use onnx_safeify::verify::pb;
    let mut errors = Vec::new();
    match npz::parse_npy(data) {
        Ok(t) => {
            // What was read writes back and reads again the same.
            if let Ok(bytes) = npz::npy_bytes(&t) {
                let again = npz::parse_npy(&bytes)
                    .unwrap_or_else(|e| panic!("a written .npy does not read back: {e}"));
                assert!(again == t, "a .npy round trip changed the tensor");
            }
        }
        Err(e) => errors.push(e),
    }
    match onnx_safeify::proto::TensorProto::decode(data) {
        Ok(p) => {
            if let Err(e) = pb::tensor_from_proto(&p) {
                errors.push(e);
            }
        }
        Err(e) => errors.push(e.to_string()),
    }
    if data.starts_with(b"PK") {
        let dir = scratch_dir();
        let path = dir.join("in.npz");
        std::fs::write(&path, data).map_err(|e| e.to_string())?;
        if let Err(e) = npz::read_npz(&path) {
            errors.push(e);
        }
    }
    if errors.len() == 3 || (errors.len() == 2 && !data.starts_with(b"PK")) {
        Err(errors.join("; "))
    } else {
        Ok(())
    }
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onnx-safeify-fuzz-npz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp folder");
    dir
}

/// Replay one file through the target its folder names (`model`, `rules`, `tensors` or
/// `unknown`).
pub fn replay(path: &Path) -> Result<(), String> {
    replay_with(path, stress_enabled())
}

/// [`replay`], compiling models with [`STRESS_TARGET`] or not.
pub fn replay_with(path: &Path, stress_compile: bool) -> Result<(), String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let kind = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    match kind {
        "rules" => rules_input(&data),
        "tensors" => tensors_input(&data),
        "unknown" => unknown_input(&data),
        _ => model_input_with(&data, stress_compile),
    }
}
