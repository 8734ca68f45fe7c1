//! External data the output keeps unchanged is not copied (issue 36): in the input's folder the
//! output refers to the input's data files; in another folder they are cloned or copied under
//! the same name (`--weights share`, the default), hard-linked (`--weights link`), or written
//! afresh as OUT.data (`--weights copy`). `--target none` gives files identical to the input's.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A model with external data (PP-OCR cls, its constants as initializers, saved by Python's
/// onnx with every tensor of 256 bytes or more in `weights.bin`), in a folder of its own.
fn external_model(dir: &Path) -> Option<PathBuf> {
    let corpus = common::corpus()?;
    let py = common::venv_python()?;
    let real = corpus.join("real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx");
    let script = r#"
import sys, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
g = m.graph
keep = []
for n in g.node:
    if n.op_type == "Constant" and n.attribute[0].name == "value":
        g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(n.attribute[0].t), n.output[0]))
    else:
        keep.append(n)
del g.node[:]; g.node.extend(keep)
onnx.save(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True,
          location="weights.bin", size_threshold=256)
"#;
    let model = dir.join("cls.onnx");
    let st = Command::new(py)
        .args(["-c", script, real.to_str()?, model.to_str()?])
        .status()
        .ok()?;
    assert!(
        st.success(),
        "python could not write the external-data model"
    );
    Some(model)
}

fn compile(args: &[&str]) -> (bool, String) {
    let o = Command::new(common::bin()).args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn none_in_the_same_folder_writes_the_model_only_and_it_is_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = external_model(dir.path()) else {
        eprintln!("SKIP: no corpus or venv (run scripts/corpus.sh)");
        return;
    };
    let data = dir.path().join("weights.bin");
    let before = std::fs::metadata(&data).unwrap();
    let out = dir.path().join("cls.none.onnx");
    let (ok, err) = compile(&[
        model.to_str().unwrap(),
        "-t",
        "none",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("shared with the input"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&model).unwrap());
    // Nothing else was written: the data file is the input's, untouched.
    assert_eq!(
        names(dir.path()),
        ["cls.none.onnx", "cls.onnx", "weights.bin"]
    );
    let after = std::fs::metadata(&data).unwrap();
    assert_eq!(
        (before.ino(), before.mtime(), before.len()),
        (after.ino(), after.mtime(), after.len())
    );
}

#[test]
fn another_folder_gets_the_files_under_their_names_linked_or_copied() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = external_model(dir.path()) else {
        eprintln!("SKIP: no corpus or venv (run scripts/corpus.sh)");
        return;
    };
    let data = dir.path().join("weights.bin");
    for (mode, linked) in [("share", false), ("link", true)] {
        let out_dir = dir.path().join(mode);
        std::fs::create_dir(&out_dir).unwrap();
        let out = out_dir.join("cls.none.onnx");
        let (ok, err) = compile(&[
            model.to_str().unwrap(),
            "-t",
            "none",
            "-o",
            out.to_str().unwrap(),
            "--weights",
            mode,
        ]);
        assert!(ok, "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&model).unwrap());
        assert_eq!(names(&out_dir), ["cls.none.onnx", "weights.bin"]);
        let placed = out_dir.join("weights.bin");
        assert_eq!(
            std::fs::read(&placed).unwrap(),
            std::fs::read(&data).unwrap()
        );
        let same_inode =
            std::fs::metadata(&placed).unwrap().ino() == std::fs::metadata(&data).unwrap().ino();
        assert_eq!(same_inode, linked, "{mode}: {err}");
        // A second compile over the placed files is fine (and a link stays one file).
        let (ok, err) = compile(&[
            model.to_str().unwrap(),
            "-t",
            "none",
            "-o",
            out.to_str().unwrap(),
            "--weights",
            mode,
        ]);
        assert!(ok, "{err}");
        assert_eq!(
            std::fs::read(&placed).unwrap(),
            std::fs::read(&data).unwrap()
        );
    }
}

#[test]
fn copy_writes_one_fresh_data_file_and_a_rewrite_still_shares() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = external_model(dir.path()) else {
        eprintln!("SKIP: no corpus or venv (run scripts/corpus.sh)");
        return;
    };
    let out = dir.path().join("cls.copy.onnx");
    let (ok, err) = compile(&[
        model.to_str().unwrap(),
        "-t",
        "none",
        "-o",
        out.to_str().unwrap(),
        "--weights",
        "copy",
    ]);
    assert!(ok, "{err}");
    assert!(dir.path().join("cls.copy.onnx.data").exists(), "{err}");
    // A target that rewrites nodes keeps the input's references for the tensors it leaves.
    let out = dir.path().join("cls.rx580.onnx");
    let (ok, err) = compile(&[
        model.to_str().unwrap(),
        "-t",
        "rx580",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(!dir.path().join("cls.rx580.onnx.data").exists(), "{err}");
    let py = common::venv_python().unwrap();
    let check = r#"
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
locs = {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}
assert locs == {"weights.bin"}, locs
onnx.load(sys.argv[1])  # the references resolve
print("ok")
"#;
    let o = Command::new(py)
        .args(["-c", check, out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (ok, err) = compile(&["verify", model.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(ok, "{err}");
}
