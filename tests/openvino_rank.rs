//! OpenVINO cannot compile an op that reads a value of unknown rank, such as the output of an
//! If whose branches yield different ranks (silero-vad's squeeze-if), and ONNX Runtime's
//! OpenVINO provider ignores `layer_ann` pins. So `openvino-gpu` (`cpu_subgraphs: partition`)
//! writes such a model as segment models and a manifest: the If, and every node reading a value
//! of unknown rank derived from it, in CPU segments; the rest (the heavy convolutions) in GPU
//! segments. A model with nothing pinned is written as one model, as before; asking for
//! `--cpu-subgraphs annotate` where pins are needed is a usage error (exit 2).
//!
//! The chain is verified on ONNX Runtime CPU (`verify ORIGINAL MANIFEST`) and, where the venv
//! with onnxruntime-openvino exists ($ONNX_SAFEIFY_OVEP_VENV, else the cache's `ovep-venv`),
//! with its GPU segments under the OpenVINO provider (`tests/openvino_manifest.py`); without
//! that venv the OpenVINO part is skipped, and says so.

mod common;
mod runtimes_support;

use std::path::{Path, PathBuf};

use runtimes_support::{run, verify_json};

/// Two models: `if_ranks_differ` (then: Squeeze to rank 2, else: Identity, rank 3, then a
/// ReduceMean) and `if_ranks_agree` (both branches rank 3).
fn models(dir: &Path) -> Option<Vec<(String, PathBuf)>> {
    let py = common::venv_python()?;
    let script = r#"
import sys, onnx, onnx.helper as h
from onnx import TensorProto as T
out = sys.argv[1]
def branch(name, squeeze):
    nodes = []
    if squeeze:
        nodes.append(h.make_node('Constant', [], ['ax'], name=name + '_ax',
                                 value=h.make_tensor('v', T.INT64, [1], [1])))
        nodes.append(h.make_node('Squeeze', ['s', 'ax'], [name + '_y'], name=name + '_sq'))
    else:
        nodes.append(h.make_node('Identity', ['s'], [name + '_y'], name=name + '_id'))
    shape = ['N', 8] if squeeze else ['N', 'C', 8]
    return h.make_graph(nodes, name, [], [h.make_tensor_value_info(name + '_y', T.FLOAT, shape)])
for name, squeeze in [('if_ranks_differ', True), ('if_ranks_agree', False)]:
    nodes = [
        h.make_node('Sigmoid', ['x'], ['s'], name='sig'),
        h.make_node('Shape', ['x'], ['shp'], name='shape'),
        # The squeezing branch runs only when dim 1 is 1.
        h.make_node('Gather', ['shp', 'one'], ['c'], name='gather', axis=0),
        h.make_node('Equal', ['c', 'one'], ['cond'], name='eq'),
        h.make_node('If', ['cond'], ['v'], name='branchy',
                    then_branch=branch('then', squeeze), else_branch=branch('else', False)),
        h.make_node('ReduceMean', ['v'], ['y'], name='mean', axes=[-1], keepdims=0),
    ]
    g = h.make_graph(nodes, name, [h.make_tensor_value_info('x', T.FLOAT, ['N', 'C', 8])],
                     [h.make_tensor_value_info('y', T.FLOAT, None)],
                     [h.make_tensor('one', T.INT64, [], [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid('', 13)]); m.ir_version = 8
    onnx.save(m, f'{out}/{name}.onnx')
"#;
    let ok = std::process::Command::new(py)
        .args(["-c", script])
        .arg(dir)
        .status()
        .ok()?
        .success();
    assert!(ok, "could not make the test models");
    Some(
        ["if_ranks_differ", "if_ranks_agree"]
            .iter()
            .map(|n| (n.to_string(), dir.join(format!("{n}.onnx"))))
            .collect(),
    )
}

/// The manifest listed in a manifest file: (file, device, inputs, outputs) per segment, read
/// with the same YAML reader verify uses.
fn segments(manifest: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let file = onnx_safeify::verify::manifest::parse_manifest(manifest, &text).unwrap();
    file.segments
        .iter()
        .map(|s| {
            (
                s.file.display().to_string(),
                s.device
                    .map(|d| format!("{d:?}").to_lowercase())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// The node names of a segment model.
fn node_names(path: &Path) -> Vec<String> {
    let m = onnx_safeify::load(path).unwrap();
    let g = &m.model.graph;
    g.order
        .iter()
        .map(|&n| g.node(n).name.clone().unwrap_or_default())
        .collect()
}

/// The Python of the venv with onnxruntime-openvino, if there is one.
fn ovep_python() -> Option<PathBuf> {
    let dir = std::env::var_os("ONNX_SAFEIFY_OVEP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::cache_dir().join("ovep-venv"));
    let py = dir.join("bin/python");
    py.exists().then_some(py)
}

/// Runs `tests/openvino_manifest.py` under the OpenVINO venv; None (and a loud skip) without it.
fn run_on_openvino(original: &Path, manifest: &Path, sets: &[PathBuf]) -> Option<(i32, String)> {
    let Some(py) = ovep_python() else {
        eprintln!(
            "SKIPPED (OpenVINO provider part): no venv with onnxruntime-openvino \
             ($ONNX_SAFEIFY_OVEP_VENV or ~/.cache/onnx-safeify/ovep-venv)"
        );
        return None;
    };
    let o = std::process::Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/openvino_manifest.py"
        ))
        .arg(original)
        .arg(manifest)
        .args(sets)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some((o.status.code().unwrap_or(-1), text))
}

#[test]
fn an_if_of_unknown_rank_goes_to_cpu_segments_for_openvino_gpu() {
    let d = tempfile::tempdir().unwrap();
    let Some(models) = models(d.path()) else {
        eprintln!("SKIPPED: no venv with onnx (run scripts/setup-runtimes.sh)");
        return;
    };
    for (name, m) in &models {
        let out = d.path().join(format!("{name}.openvino-gpu.onnx"));
        let manifest = d.path().join(format!("{name}.openvino-gpu.manifest.yaml"));
        let args = [
            m.to_str().unwrap(),
            "--target",
            "openvino-gpu",
            "-o",
            out.to_str().unwrap(),
        ];
        let o = run(&args, &[]);
        let all = format!("{}{}", o.stdout, o.stderr);
        if name == "if_ranks_agree" {
            // Nothing pinned: one model, as before.
            assert_eq!(o.code, 0, "{name}: {all}");
            assert!(out.exists() && !manifest.exists(), "{all}");
            continue;
        }
        assert_eq!(o.code, 0, "{name}: {all}");
        assert!(!out.exists(), "no single model is written: {all}");
        assert!(all.contains("ignores CPU pins"), "the note says why: {all}");
        assert!(
            all.contains("openvino-needs-rank"),
            "the rule is named: {all}"
        );
        // The If and the ReduceMean that reads its unknown-rank output run on the CPU; the
        // Sigmoid before them on the GPU.
        let segs = segments(&manifest);
        let devices: Vec<&str> = segs.iter().map(|(_, dev)| dev.as_str()).collect();
        assert_eq!(devices, ["gpu", "cpu"], "{segs:?}");
        let gpu = node_names(&d.path().join(&segs[0].0));
        let cpu = node_names(&d.path().join(&segs[1].0));
        assert!(gpu.contains(&"sig".to_string()), "{gpu:?}");
        for n in ["branchy", "mean"] {
            assert!(cpu.contains(&n.to_string()), "{n} on the CPU: {cpu:?}");
        }
        assert!(
            all.contains("mean (ReduceMean)"),
            "the added node is named: {all}"
        );
        // The chain computes what the original does (ONNX Runtime CPU, both branches).
        let (c, j, o) = verify_json(m, &manifest, "cpu", &[]);
        assert_eq!(c, 0, "{}{}", o.stdout, o.stderr);
        assert!(j.is_some());
        // An annotated model would not load there: asking for one is a usage error.
        let annotated = d.path().join("annotated.onnx");
        let o = run(
            &[
                m.to_str().unwrap(),
                "--target",
                "openvino-gpu",
                "--cpu-subgraphs",
                "annotate",
                "-o",
                annotated.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(o.stderr.contains("ignores CPU pins"), "{}", o.stderr);
        assert!(!annotated.exists());
        // Other targets pin it in one model, as before.
        let o = run(
            &[
                m.to_str().unwrap(),
                "--target",
                "rx580",
                "-o",
                d.path().join("differ.rx580.onnx").to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
}

/// Inputs for the squeeze-if model: L = 9 (T = 1, the Squeeze branch) and L = 512.
fn squeeze_if_inputs(py: &Path, dir: &Path) -> Vec<PathBuf> {
    let script = r#"
import sys, numpy as np
rng = np.random.default_rng(5)
for n in (9, 512):
    np.savez(f"{sys.argv[1]}/x{n}.npz", x=rng.standard_normal((1, n)).astype(np.float32))
"#;
    let ok = std::process::Command::new(py)
        .args(["-c", script])
        .arg(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    [9, 512]
        .iter()
        .map(|n| dir.join(format!("x{n}.npz")))
        .collect()
}

#[test]
fn squeeze_if_model_keeps_its_convolutions_on_the_gpu_and_runs_on_openvino() {
    let Some(py) = common::venv_python() else {
        eprintln!("SKIPPED: no venv with onnx (run scripts/setup-runtimes.sh)");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("squeeze_if.onnx");
    let ok = std::process::Command::new(&py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tools/make_squeeze_if.py"
        ))
        .arg(&m)
        .status()
        .unwrap()
        .success();
    assert!(ok, "tools/make_squeeze_if.py failed");
    let manifest = d.path().join("sq.manifest.yaml");
    let o = run(
        &[
            m.to_str().unwrap(),
            "--target",
            "openvino-gpu",
            "-o",
            manifest.to_str().unwrap(),
        ],
        &[],
    );
    let all = format!("{}{}", o.stdout, o.stderr);
    assert_eq!(o.code, 0, "{all}");
    let segs = segments(&manifest);
    let mut on = std::collections::HashMap::new();
    for (file, dev) in &segs {
        for n in node_names(&d.path().join(file)) {
            on.insert(n, dev.clone());
        }
    }
    for n in ["enc/Conv1", "enc/Conv2", "out/Mul"] {
        assert_eq!(
            on.get(n).map(String::as_str),
            Some("gpu"),
            "{n}: {segs:?} {on:?}"
        );
    }
    for n in ["dec/If", "dec/If_1", "dec/ReduceSum"] {
        assert_eq!(
            on.get(n).map(String::as_str),
            Some("cpu"),
            "{n}: {segs:?} {on:?}"
        );
    }
    let sets = squeeze_if_inputs(&py, d.path());
    for set in &sets {
        let (c, _, o) = verify_json(&m, &manifest, "cpu", &["--inputs", set.to_str().unwrap()]);
        assert_eq!(c, 0, "{}{}", o.stdout, o.stderr);
    }
    if let Some((code, text)) = run_on_openvino(&m, &manifest, &sets) {
        eprintln!("{text}");
        assert_eq!(code, 0, "{text}");
        assert!(
            text.contains("(gpu)") && text.contains("all on OpenVINO"),
            "{text}"
        );
    }
}

#[test]
fn silero_vad_on_openvino_gpu_runs_under_the_openvino_provider() {
    let Some(c) = common::corpus() else {
        return;
    };
    let Some(py) = common::venv_python() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let models = common::onnx_files(&c.join("extra"));
    let silero: Vec<&PathBuf> = models
        .iter()
        .filter(|m| {
            m.file_name()
                .unwrap()
                .to_string_lossy()
                .contains("silero_vad")
        })
        .collect();
    assert!(silero.len() >= 3, "{models:?}");
    for m in silero {
        let stem = m.file_stem().unwrap().to_string_lossy().to_string();
        let manifest = d.path().join(format!("{stem}.manifest.yaml"));
        let o = run(
            &[
                m.to_str().unwrap(),
                "--target",
                "openvino-gpu",
                "-o",
                manifest.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(o.code, 0, "{stem}: {}", o.stderr);
        // 16 kHz input (and 8 kHz where the model takes a sample rate).
        let script = r#"
import sys, numpy as np, onnx
names = [i.name for i in onnx.load(sys.argv[1]).graph.input]
rng = np.random.default_rng(3)
for sr, n in [(16000, 512), (8000, 256)]:
    if sr == 8000 and "sr" not in names:
        continue
    feed = {"input": (rng.standard_normal((1, n)) * 0.1).astype(np.float32),
            "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32)}
    if "sr" in names:
        feed["sr"] = np.array(sr, np.int64)
    np.savez(f"{sys.argv[2]}_{sr}.npz", **feed)
    print(f"{sys.argv[2]}_{sr}.npz")
"#;
        let o = std::process::Command::new(&py)
            .args(["-c", script])
            .arg(m)
            .arg(d.path().join(&stem))
            .output()
            .unwrap();
        assert!(o.status.success());
        let sets: Vec<PathBuf> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect();
        for set in &sets {
            let (c, _, o) = verify_json(m, &manifest, "cpu", &["--inputs", set.to_str().unwrap()]);
            assert_eq!(c, 0, "{stem}: {}{}", o.stdout, o.stderr);
        }
        if let Some((code, text)) = run_on_openvino(m, &manifest, &sets) {
            eprintln!("{stem}:\n{text}");
            assert_eq!(code, 0, "{stem}: {text}");
        }
    }
}

#[test]
fn cpu_subgraphs_key_is_parsed_inherited_and_checked() {
    use onnx_safeify::rules::{
        load_target, load_target_from, parse_target_str, CpuSubgraphs, MemFs,
    };
    assert_eq!(
        load_target("openvino-gpu").unwrap().cpu_subgraphs,
        CpuSubgraphs::Partition
    );
    assert_eq!(
        load_target("rx580").unwrap().cpu_subgraphs,
        CpuSubgraphs::Annotate
    );
    // Inherited, and overridable, key by key as `provider` is.
    let fs = MemFs::new()
        .with("child.yaml", "target: child\nextends: openvino-gpu\n")
        .with(
            "pins.yaml",
            "target: pins\nextends: openvino-gpu\ncpu_subgraphs: annotate\n",
        );
    let t = load_target_from(&fs, "child.yaml", &[]).unwrap();
    assert_eq!(t.cpu_subgraphs, CpuSubgraphs::Partition);
    let t = load_target_from(&fs, "pins.yaml", &[]).unwrap();
    assert_eq!(t.cpu_subgraphs, CpuSubgraphs::Annotate);
    // A bad value names the file and the line, with a suggestion.
    let e = parse_target_str(
        "bad.yaml",
        "target: bad\nextends: none\ncpu_subgraphs: partitions\n",
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("bad.yaml"), "{text}");
    assert!(
        text.contains("unknown `cpu_subgraphs` value `partitions`"),
        "{text}"
    );
    assert!(text.contains("did you mean `partition`?"), "{text}");
    assert_eq!(e.diagnostics[0].line, 3, "{text}");
    // A --rules file cannot change it.
    let fs = MemFs::new().with("extra.yaml", "cpu_subgraphs: annotate\n");
    let e = load_target_from(&fs, "openvino-gpu", &[PathBuf::from("extra.yaml")]).unwrap_err();
    assert!(e.to_string().contains("is the target's"), "{e}");
}
