//! onnxruntime-genai folders (issue 34): `onnx-safeify DIR --target T` writes a new folder with
//! the models compiled, the config's session options given the target's runtime settings, the
//! other files copied; nothing is written when the folder's config is bad.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tiny int4 decoder in a genai folder (tools/make_llm.py), with one prefill's inputs.
fn tiny_folder(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let py = common::venv_python()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let folder = dir.join("llm");
    let st = Command::new(&py)
        .arg(root.join("tools/make_llm.py"))
        .arg(&folder)
        .args(["--size", "tiny"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let inputs = dir.join("prefill.npz");
    let script = r#"
import sys, numpy as np
f = {"input_ids": np.array([[1, 5, 9, 3]], np.int64), "attention_mask": np.ones((1, 4), np.int64)}
for i in range(2):
    for k in ("key", "value"):
        f[f"past_key_values.{i}.{k}"] = np.zeros((1, 2, 0, 32), np.float16)
np.savez(sys.argv[1], **f)
"#;
    let st = Command::new(&py)
        .args(["-c", script, inputs.to_str()?])
        .status()
        .unwrap();
    assert!(st.success());
    Some((folder, inputs))
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(common::bin()).args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_genai_folder_compiles_into_a_new_folder_with_the_settings_merged() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((folder, inputs)) = tiny_folder(tmp.path()) else {
        eprintln!("SKIP: no venv (run scripts/corpus.sh)");
        return;
    };
    let before = listing(&folder);
    let (code, err) = run(&[folder.to_str().unwrap(), "--target", "rx580"]);
    assert_eq!(code, Some(0), "{err}");
    let out = tmp.path().join("llm.rx580");
    assert_eq!(
        listing(&out),
        [
            "genai_config.json",
            "model.onnx",
            "model.onnx.data",
            "tokenizer_config.json"
        ],
        "{err}"
    );
    assert_eq!(listing(&folder), before, "the input folder changed");
    assert_eq!(
        std::fs::read(out.join("tokenizer_config.json")).unwrap(),
        std::fs::read(folder.join("tokenizer_config.json")).unwrap()
    );
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("genai_config.json")).unwrap()).unwrap();
    let entries = &cfg["model"]["decoder"]["session_options"]["config_entries"];
    assert_eq!(
        entries["session.layer_assignment_settings"], "cpu(safeify_cpu)",
        "{cfg}"
    );
    assert_eq!(
        cfg["model"]["decoder"]["session_options"]["log_id"],
        "onnxruntime-genai"
    );
    assert_eq!(cfg["search"]["num_beams"], 1);
    // The compiled model is clean for its target and computes what the original does (one
    // prefill step).
    let model = out.join("model.onnx");
    let (code, err) = run(&["check", model.to_str().unwrap(), "--target", "rx580"]);
    assert_eq!(code, Some(0), "{err}");
    let original = folder.join("model.onnx");
    let (code, err) = run(&[
        "verify",
        original.to_str().unwrap(),
        model.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    // `verify` of the two folders runs the decoder as generation does: a prefill step, then a
    // decode step on the original's past state, each judged at the rewrite's class.
    let o = Command::new(common::bin())
        .args(["verify", folder.to_str().unwrap(), out.to_str().unwrap()])
        .args(["--format", "json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let steps: Vec<(&str, &str)> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["model"].as_str().unwrap(), s["step"].as_str().unwrap()))
        .collect();
    assert_eq!(steps, [("model.onnx", "prefill"), ("model.onnx", "decode")]);
    let decode = &v["steps"][1]["report"];
    assert_eq!(decode["exactness"]["class"], "rounding", "{decode}");
    let shapes: Vec<String> = decode["runs"][0]["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{} {}", c["name"].as_str().unwrap(), c["shape"]))
        .collect();
    // One new token after the 6-token prompt: logits for 1 position, 7 cached positions.
    assert!(
        shapes.contains(&"logits [1,1,512]".to_string()),
        "{shapes:?}"
    );
    assert!(
        shapes.contains(&"present.1.value [1,2,7,32]".to_string()),
        "{shapes:?}"
    );
    // A second compile replaces the folder it wrote.
    let (code, err) = run(&[folder.to_str().unwrap(), "--target", "rx580"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_bad_config_is_an_error_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("llm");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(
        folder.join("genai_config.json"),
        r#"{"model": {"decoder": {"filename": "../outside.onnx"}}}"#,
    )
    .unwrap();
    let (code, err) = run(&[folder.to_str().unwrap(), "--target", "rx580"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("genai_config.json") && err.contains("../outside.onnx"),
        "{err}"
    );
    assert_eq!(listing(tmp.path()), ["llm"]);
}

/// `verify` of two genai folders catches a decoder that computes something else, and a folder
/// against a model file is a usage error.
#[test]
fn verify_of_genai_folders_fails_on_changed_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((folder, _)) = tiny_folder(tmp.path()) else {
        eprintln!("SKIP: no venv (run scripts/corpus.sh)");
        return;
    };
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&folder).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    let (code, err) = run(&["verify", folder.to_str().unwrap(), copy.to_str().unwrap()]);
    assert_eq!(code, Some(0), "an identical copy verifies: {err}");
    // Change the last weights of the external data (the final layers' bytes, read by every
    // step): the logits move in both steps.
    let data = copy.join("model.onnx.data");
    let mut bytes = std::fs::read(&data).unwrap();
    let n = bytes.len();
    for b in bytes[n - 64..].chunks_mut(2) {
        b[1] ^= 0x02;
    }
    std::fs::write(&data, bytes).unwrap();
    let o = Command::new(common::bin())
        .args(["verify", folder.to_str().unwrap(), copy.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "genai folder: FAIL (2 steps; failed: model.onnx prefill, model.onnx decode)"
        ),
        "{text}"
    );
    let model = folder.join("model.onnx");
    let (code, err) = run(&["verify", folder.to_str().unwrap(), model.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is an onnxruntime-genai folder but"), "{err}");
}

/// The compile of a folder names the files where the user finds them (not the temporary
/// folder it builds the output in), and the output's config is the user's text with the
/// settings added: key order, indentation and everything else as they were.
#[test]
fn a_folder_compile_shows_final_paths_and_keeps_the_config_text() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((folder, _)) = tiny_folder(tmp.path()) else {
        eprintln!("SKIP: no venv (run scripts/corpus.sh)");
        return;
    };
    let (code, err) = run(&[folder.to_str().unwrap(), "--target", "rx580"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains(".tmp-"), "a temporary path is shown:\n{err}");
    let out = tmp.path().join("llm.rx580");
    assert!(
        err.contains(&format!("wrote {}", out.join("model.onnx").display())),
        "{err}"
    );
    let before = std::fs::read_to_string(folder.join("genai_config.json")).unwrap();
    let after = std::fs::read_to_string(out.join("genai_config.json")).unwrap();
    let at = before.find("\"provider_options\": []").unwrap() + "\"provider_options\": []".len();
    let (head, tail) = before.split_at(at);
    assert!(
        after.starts_with(head) && after.ends_with(tail),
        "the config was rewritten beyond the new entry:\n{after}"
    );
    let added = &after[head.len()..after.len() - tail.len()];
    let rx580 = onnx_safeify::rules::load_target("rx580").unwrap();
    let list = rx580
        .runtime_value("optimization.disable_specified_optimizers")
        .unwrap();
    assert_eq!(
        added,
        format!(",\n                \"config_entries\": {{\n                    \"ep.dml.disable_graph_fusion\": \"1\",\n                    \"optimization.disable_specified_optimizers\": \"{list}\",\n                    \"session.layer_assignment_settings\": \"cpu(safeify_cpu)\"\n                }}")
    );
}
