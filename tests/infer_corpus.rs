//! Shape inference against real models: the ONNX backend node tests (whose graph outputs
//! declare the true shapes), ONNX's own shape inference on the PP-OCR models, ONNX Runtime
//! on the contrib models, and a no-panic sweep over the whole corpus.
//!
//! The corpus is at `~/.cache/onnx-safeify/corpus` (`ONNX_SAFEIFY_CORPUS` overrides); the
//! tests fail when it is missing unless `ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::infer::{infer_graph, infer_model, Dim, Facts, InferOptions, TensorInfo};
use onnx_safeify::ir::Graph;
use onnx_safeify::proto::{tensor_shape_proto::dimension, type_proto, ValueInfoProto};

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
}

/// The corpus folder, or `None` (test skipped) when it is missing and that is allowed.
fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("ONNX_SAFEIFY_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/onnx-safeify/corpus"));
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref() == Ok("1") {
        eprintln!("corpus {} missing: test skipped", dir.display());
        return None;
    }
    panic!(
        "the test corpus is missing at {} (set ONNX_SAFEIFY_CORPUS, or \
         ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip these tests)",
        dir.display()
    );
}

/// The Python of the project's virtual environment (with onnx and onnxruntime), found
/// where the corpus is; like the corpus, its absence fails the test unless allowed.
fn venv_python() -> Option<PathBuf> {
    let p = std::env::var_os("ONNX_SAFEIFY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/onnx-safeify/venv"))
        .join("bin/python");
    if p.is_file() {
        return Some(p);
    }
    if std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref() == Ok("1") {
        eprintln!("{} missing: test skipped", p.display());
        return None;
    }
    panic!(
        "the corpus virtual environment is missing: no {} (set ONNX_SAFEIFY_VENV, or \
         ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip these tests)",
        p.display()
    );
}

/// A declared tensor type as plain (dtype, dims) where every dim is known.
fn declared_known(p: &ValueInfoProto) -> Option<(i32, Vec<i64>)> {
    let Some(type_proto::Value::TensorType(t)) = p.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    let dims: Option<Vec<i64>> = t
        .shape
        .as_ref()?
        .dim
        .iter()
        .map(|d| match d.value {
            Some(dimension::Value::DimValue(v)) if v >= 0 => Some(v),
            _ => None,
        })
        .collect();
    Some((t.elem_type.unwrap_or(0), dims?))
}

#[derive(Default, Debug)]
struct Tally {
    exact: usize,
    unknown: usize,
    wrong: Vec<String>,
    dtype_exact: usize,
    dtype_unknown: usize,
    not_loaded: usize,
    /// op type producing the output -> (exact, unknown)
    by_op: BTreeMap<String, (usize, usize)>,
}

#[test]
fn backend_node_tests_agree_with_declared_outputs() {
    let Some(dir) = corpus() else { return };
    let root = dir.join("onnx_node_tests_1.19.1");
    assert!(root.is_dir(), "{} is missing", root.display());
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("model.onnx")))
        .filter(|p| p.is_file())
        .collect();
    cases.sort();
    assert!(cases.len() > 1000, "only {} node tests found", cases.len());
    let opts = InferOptions {
        ignore_output_decls: true,
        ..Default::default()
    };
    let mut t = Tally::default();
    for path in &cases {
        let name = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let doc = match onnx_safeify::load(path) {
            Ok(d) => d,
            Err(_) => {
                t.not_loaded += 1;
                continue;
            }
        };
        let g = &doc.model.graph;
        let facts = infer_model(&doc.model, &opts);
        for o in &g.outputs {
            let op = match g.value(o.value).origin {
                onnx_safeify::ir::Origin::Node { node, .. } => g.node(node).op_type.clone(),
                _ => "(input)".to_string(),
            };
            let Some((dtype, dims)) = declared_known(&o.proto) else {
                continue;
            };
            let info = facts.info(o.value);
            match info.dtype {
                Some(d) if d == dtype || dtype == 0 => t.dtype_exact += 1,
                Some(d) => t.wrong.push(format!(
                    "{name}: output '{}' dtype {d}, declared {dtype}",
                    g.value_name(o.value)
                )),
                None => t.dtype_unknown += 1,
            }
            let e = t.by_op.entry(op.clone()).or_default();
            match info.dims_known() {
                Some(k) if k == dims => {
                    t.exact += 1;
                    e.0 += 1;
                }
                Some(k) => t.wrong.push(format!(
                    "{name}: output '{}' inferred {k:?}, declared {dims:?}",
                    g.value_name(o.value)
                )),
                None => {
                    // A known rank must still agree, and known dims must match.
                    if let Some(s) = &info.shape {
                        let bad = s.len() != dims.len()
                            || s.iter()
                                .zip(&dims)
                                .any(|(d, &x)| matches!(d, Dim::Known(k) if *k != x));
                        if bad {
                            t.wrong.push(format!(
                                "{name}: output '{}' inferred {info}, declared {dims:?}",
                                g.value_name(o.value)
                            ));
                            continue;
                        }
                    }
                    t.unknown += 1;
                    e.1 += 1;
                    if std::env::var_os("INFER_VERBOSE").is_some() {
                        eprintln!(
                            "unknown: {name} '{}': {info}, declared {dims:?}",
                            g.value_name(o.value)
                        );
                    }
                }
            }
        }
    }
    let misses: Vec<String> = t
        .by_op
        .iter()
        .filter(|(_, v)| v.1 > 0)
        .map(|(k, v)| format!("{k}:{}/{}", v.1, v.0 + v.1))
        .collect();
    eprintln!(
        "node tests: unknown / all outputs by producing op: {}",
        misses.join(" ")
    );
    eprintln!(
        "node tests: {} models ({} not loaded); outputs with declared static shapes: \
         {} exact, {} unknown, {} wrong; dtypes: {} exact, {} unknown",
        cases.len(),
        t.not_loaded,
        t.exact,
        t.unknown,
        t.wrong.len(),
        t.dtype_exact,
        t.dtype_unknown
    );
    assert!(
        t.wrong.is_empty(),
        "wrong inferences:\n{}",
        t.wrong.join("\n")
    );
    // Coverage floor: most outputs must be inferred exactly.
    assert!(
        t.exact * 10 >= (t.exact + t.unknown) * 8,
        "coverage dropped: {t:?}"
    );
}

/// Every .onnx file under `dir`, recursively, sorted.
fn onnx_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| Some(e.ok()?.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            onnx_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "onnx") {
            out.push(p);
        }
    }
}

/// Run inference on `g` and on each of its subgraphs.
fn infer_all(model: &onnx_safeify::Model, g: &Graph, opts: &InferOptions) -> usize {
    let mut n = 0;
    g.walk(0, &mut |sub, _| {
        let f = infer_graph(model, sub, opts);
        n += f.len();
    });
    n
}

#[test]
fn inference_never_panics_on_the_corpus() {
    let Some(dir) = corpus() else { return };
    let mut files = Vec::new();
    onnx_files(&dir, &mut files);
    files.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx"));
    assert!(files.len() > 1000);
    let mut loaded = 0;
    for f in &files {
        let Ok(doc) = onnx_safeify::load(f) else {
            continue;
        };
        loaded += 1;
        let r = std::panic::catch_unwind(|| {
            infer_all(&doc.model, &doc.model.graph, &InferOptions::default());
            // And again with every declaration of the outputs ignored.
            let o = InferOptions {
                ignore_output_decls: true,
                ..Default::default()
            };
            infer_all(&doc.model, &doc.model.graph, &o);
        });
        assert!(r.is_ok(), "inference panicked on {}", f.display());
    }
    eprintln!(
        "inferred {loaded} of {} corpus models without a panic",
        files.len()
    );
}

/// Facts of a PP-OCR model with a concrete input shape, and the declared output names.
fn ppocr_infer(path: &Path, dims: &[(&str, i64)]) -> (onnx_safeify::Document, Facts) {
    let doc = onnx_safeify::load(path).unwrap();
    let opts = InferOptions {
        dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..Default::default()
    };
    let facts = infer_model(&doc.model, &opts);
    (doc, facts)
}

/// ONNX's own shape inference through the venv Python: value name -> (dtype, dims) for
/// every value whose dims it fully knows. The input's shape is fixed to `input_shape`.
fn onnx_shape_inference(
    path: &Path,
    input_shape: &[i64],
) -> Option<BTreeMap<String, (i32, Vec<i64>)>> {
    let py = venv_python()?;
    let script = r#"
import sys, onnx
from onnx import shape_inference
m = onnx.load(sys.argv[1])
shape = [int(x) for x in sys.argv[2].split(',')]
inits = {i.name for i in m.graph.initializer}
inp = [i for i in m.graph.input if i.name not in inits][0]
dims = inp.type.tensor_type.shape.dim
del dims[:]
for d in shape:
    dims.add().dim_value = d
del m.graph.value_info[:]
m = shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
for vi in list(m.graph.value_info) + list(m.graph.output):
    t = vi.type.tensor_type
    if not t.HasField('shape'):
        continue
    ds = [d.dim_value if d.HasField('dim_value') and d.dim_value >= 0 else None for d in t.shape.dim]
    if all(d is not None for d in ds):
        print(vi.name + '\t' + str(t.elem_type) + '\t' + ','.join(str(d) for d in ds))
"#;
    let shape: Vec<String> = input_shape.iter().map(i64::to_string).collect();
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(path)
        .arg(shape.join(","))
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "onnx shape inference failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = line.split('\t');
        let (Some(name), Some(t), Some(d)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let dims: Vec<i64> = if d.is_empty() {
            vec![]
        } else {
            d.split(',').filter_map(|x| x.parse().ok()).collect()
        };
        m.insert(name.to_string(), (t.parse().unwrap_or(0), dims));
    }
    Some(m)
}

fn name_of_dims(g: &Graph, input: usize) -> Vec<String> {
    let Some(vi) = g.inputs.get(input) else {
        return vec![];
    };
    let Some(type_proto::Value::TensorType(t)) =
        vi.proto.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return vec![];
    };
    t.shape
        .as_ref()
        .map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    Some(dimension::Value::DimParam(p)) => p.clone(),
                    _ => String::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn ppocr_agrees_with_onnx_shape_inference() {
    let Some(dir) = corpus() else { return };
    if venv_python().is_none() {
        return;
    }
    let cases: &[(&str, [i64; 4])] = &[
        (
            "real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx",
            [1, 3, 640, 640],
        ),
        (
            "real/rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx",
            [1, 3, 48, 320],
        ),
        (
            "real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx",
            [1, 3, 48, 192],
        ),
    ];
    let mut report = Vec::new();
    for (rel, shape) in cases {
        let path = dir.join(rel);
        let expect = onnx_shape_inference(&path, shape).expect("python");
        // Fix the same input shape through the symbolic dimension names.
        let doc0 = onnx_safeify::load(&path).unwrap();
        let names = name_of_dims(&doc0.model.graph, 0);
        let mut fixed: Vec<(&str, i64)> = Vec::new();
        for (n, &v) in names.iter().zip(shape.iter()) {
            if !n.is_empty() && n != "?" {
                fixed.push((n.as_str(), v));
            }
        }
        let (doc, mut facts) = ppocr_infer(&path, &fixed);
        // Dims written as -1 or '?' have no name: override the input's info directly by
        // rewriting its declaration is not possible here, so use a model copy.
        if names.iter().any(|n| n.is_empty() || n == "?") {
            let mut model = doc.model.clone();
            set_input_shape(&mut model.graph, shape);
            facts = infer_model(&model, &InferOptions::default());
        }
        let g = &doc.model.graph;
        let (mut both, mut ours_only, mut theirs_only, mut wrong) = (0, 0, 0, Vec::new());
        for (i, v) in g.values.iter().enumerate() {
            let id = onnx_safeify::ir::ValueId(i as u32);
            let ours = facts.info(id).dims_known();
            match (ours, expect.get(&*v.name)) {
                (Some(o), Some((t, e))) => {
                    both += 1;
                    if &o != e || facts.info(id).dtype.is_some_and(|d| d != *t) {
                        wrong.push(format!(
                            "{}: ours {}, onnx {:?} {e:?}",
                            v.name,
                            facts.info(id),
                            t
                        ));
                    }
                }
                (Some(_), None) => {
                    ours_only += 1;
                    if std::env::var_os("INFER_VERBOSE").is_some() {
                        eprintln!("only ours: {} {}", v.name, facts.info(id));
                    }
                }
                (None, Some(_)) => theirs_only += 1,
                (None, None) => {}
            }
        }
        report.push(format!(
            "{rel}: {both} values fully known to both (agree: {}), {ours_only} only to us, \
             {theirs_only} only to onnx",
            both - wrong.len()
        ));
        assert!(
            wrong.is_empty(),
            "{rel} disagrees with onnx:\n{}",
            wrong.join("\n")
        );
        assert!(
            theirs_only * 20 <= both,
            "{rel}: too many values only onnx knows ({theirs_only})"
        );
    }
    eprintln!("{}", report.join("\n"));
}

fn set_input_shape(g: &mut Graph, shape: &[i64]) {
    let Some(vi) = g.inputs.first_mut() else {
        return;
    };
    if let Some(type_proto::Value::TensorType(t)) =
        vi.proto.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        if let Some(s) = t.shape.as_mut() {
            for (d, &v) in s.dim.iter_mut().zip(shape) {
                d.value = Some(dimension::Value::DimValue(v));
            }
        }
    }
}

#[test]
fn sample_keeps_batch_symbolic_through_resize() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
    let doc = onnx_safeify::load(&path).unwrap();
    let g = &doc.model.graph;
    let facts = infer_model(
        &doc.model,
        &InferOptions {
            ignore_output_decls: true,
            ..Default::default()
        },
    );
    let n = Dim::Sym("N".into());
    let mut resizes = 0;
    for &id in &g.order {
        let node = g.node(id);
        if node.op_type == "Resize" {
            resizes += 1;
            let out = facts.info(node.outputs[0].unwrap());
            let inp = facts.info(node.inputs[0].unwrap());
            let s = out.shape.as_ref().expect("Resize output rank");
            assert_eq!(s[0], n, "Resize output {out}");
            assert_eq!(s[1], inp.shape.as_ref().unwrap()[1], "channels kept");
            assert!(
                s[2..].iter().all(Dim::is_known),
                "static spatial dims: {out}"
            );
        }
    }
    assert_eq!(resizes, 4);
    // Every value of the graph is known up to the batch.
    for (i, v) in g.values.iter().enumerate() {
        let info = facts.info(onnx_safeify::ir::ValueId(i as u32));
        let s = info
            .shape
            .as_ref()
            .unwrap_or_else(|| panic!("{}: rank unknown", v.name));
        assert!(
            s.iter().all(|d| d.is_known() || *d == n),
            "{}: {info}",
            v.name
        );
        assert_eq!(info.dtype, Some(1), "{}", v.name);
    }
    let out = facts.info(g.outputs[0].value);
    assert_eq!(
        *out,
        TensorInfo {
            dtype: Some(1),
            shape: Some(vec![n.clone(), Dim::Known(1), Dim::Known(64), Dim::Known(64)].into())
        }
    );
    // A --dim override fixes N.
    let facts = infer_model(
        &doc.model,
        &InferOptions {
            dims: [("N".to_string(), 2)].into_iter().collect(),
            ignore_output_decls: true,
            ..Default::default()
        },
    );
    assert_eq!(
        facts.info(g.outputs[0].value).dims_known(),
        Some(vec![2, 1, 64, 64])
    );
}

/// Run a model in ONNX Runtime (venv Python, optimizations off) with every node output
/// exposed, on random inputs of the given shapes: value name -> (dtype, dims).
fn onnxruntime_shapes(
    path: &Path,
    shapes: &[Vec<i64>],
) -> Option<BTreeMap<String, (i32, Vec<i64>)>> {
    let py = venv_python().expect("checked by the caller");
    let script = r#"
import sys, onnx, numpy as np, onnxruntime as ort
from onnx import helper
m = onnx.load(sys.argv[1])
shapes = [[int(x) for x in s.split(',')] if s else [] for s in sys.argv[2:]]
seen = {o.name for o in m.graph.output}
for n in m.graph.node:
    for o in n.output:
        if o and o not in seen:
            m.graph.output.append(onnx.ValueInfoProto(name=o))
            seen.add(o)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
so.log_severity_level = 3
try:
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
except Exception as e:
    # Some contrib models have no CPU kernel (or need attributes this build wants).
    print('NOT_RUNNABLE')
    sys.exit(0)
rng = np.random.default_rng(0)
feeds = {}
for k, i in enumerate(sess.get_inputs()):
    t = [x for x in m.graph.input if x.name == i.name][0].type.tensor_type
    dt = helper.tensor_dtype_to_np_dtype(t.elem_type)
    shp = shapes[k] if k < len(shapes) else [d.dim_value for d in t.shape.dim]
    feeds[i.name] = rng.random(shp).astype(dt) if dt.kind == 'f' else rng.integers(0, 2, shp).astype(dt)
for o, v in zip(sess.get_outputs(), sess.run(None, feeds)):
    print(o.name + '\t' + str(helper.np_dtype_to_tensor_dtype(v.dtype)) + '\t' + ','.join(str(d) for d in v.shape))
"#;
    let args: Vec<String> = shapes
        .iter()
        .map(|s| s.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
        .collect();
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(path)
        .args(&args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "onnxruntime failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.starts_with("NOT_RUNNABLE") {
        return None;
    }
    let mut m = BTreeMap::new();
    for line in stdout.lines() {
        let mut it = line.split('\t');
        let (Some(name), Some(t), Some(d)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let dims: Vec<i64> = d.split(',').filter_map(|x| x.parse().ok()).collect();
        m.insert(name.to_string(), (t.parse().unwrap_or(0), dims));
    }
    Some(m)
}

/// Compare our facts (inputs fixed to `shapes`) with what ONNX Runtime computes; returns
/// (values fully known to us and agreeing, values we leave open); `None` when this
/// onnxruntime build cannot run the model (a contrib op without a CPU kernel).
fn check_against_runtime(path: &Path, shapes: &[Vec<i64>]) -> Option<(usize, usize)> {
    let runtime = onnxruntime_shapes(path, shapes)?;
    let doc = onnx_safeify::load(path).unwrap();
    let mut model = doc.model.clone();
    let g = &mut model.graph;
    for (vi, s) in g.inputs.iter_mut().zip(shapes) {
        if let Some(type_proto::Value::TensorType(t)) =
            vi.proto.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            let shape = t.shape.get_or_insert_with(Default::default);
            shape.dim = s
                .iter()
                .map(|&v| onnx_safeify::proto::tensor_shape_proto::Dimension {
                    value: Some(dimension::Value::DimValue(v)),
                    denotation: None,
                })
                .collect();
        }
    }
    let facts = infer_model(&model, &InferOptions::default());
    let g = &model.graph;
    let (mut agree, mut open, mut wrong) = (0, 0, Vec::new());
    for (i, v) in g.values.iter().enumerate() {
        let Some((t, dims)) = runtime.get(&*v.name) else {
            continue;
        };
        let info = facts.info(onnx_safeify::ir::ValueId(i as u32));
        if info.dtype.is_some_and(|d| d != *t) {
            wrong.push(format!("{}: dtype {info}, runtime {t}", v.name));
        }
        match info.dims_known() {
            Some(k) if &k == dims => agree += 1,
            Some(_) => wrong.push(format!("{}: {info}, runtime {dims:?}", v.name)),
            None => {
                let s = info.shape.as_deref();
                if s.is_some_and(|s| {
                    s.len() != dims.len()
                        || s.iter()
                            .zip(dims)
                            .any(|(d, &x)| matches!(d, Dim::Known(k) if *k != x))
                }) {
                    wrong.push(format!("{}: {info}, runtime {dims:?}", v.name));
                }
                if std::env::var_os("INFER_VERBOSE").is_some() {
                    eprintln!("open: {} {info}, runtime {dims:?}", v.name);
                }
                open += 1;
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} disagrees with onnxruntime:\n{}",
        path.display(),
        wrong.join("\n")
    );
    Some((agree, open))
}

#[test]
fn node_outputs_agree_with_onnxruntime() {
    let Some(dir) = corpus() else { return };
    if venv_python().is_none() {
        return;
    }
    let mut cases: Vec<(PathBuf, Vec<Vec<i64>>)> = Vec::new();
    for f in ["real", "ort_optimized"] {
        let mut files = Vec::new();
        onnx_files(&dir.join(f), &mut files);
        for p in files {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let shape = if name.contains("det") {
                vec![1, 3, 96, 160]
            } else if name.contains("rec") {
                vec![1, 3, 48, 320]
            } else {
                vec![1, 3, 48, 192]
            };
            cases.push((p, vec![shape]));
        }
    }
    let mut contrib = Vec::new();
    onnx_files(&dir.join("contrib"), &mut contrib);
    cases.extend(contrib.into_iter().map(|p| (p, vec![])));
    cases.push((
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx"),
        vec![vec![2, 3, 64, 64]],
    ));
    assert!(cases.len() >= 30, "only {} models", cases.len());
    let mut report = Vec::new();
    for (p, shapes) in &cases {
        let Some((agree, open)) = check_against_runtime(p, shapes) else {
            report.push(format!("{}: not runnable by this onnxruntime", p.display()));
            continue;
        };
        report.push(format!(
            "{}: {agree} values agree with onnxruntime, {open} left open",
            p.file_name().unwrap().to_string_lossy()
        ));
        // Contrib models are single fused ops: their output must be known.
        if p.parent().is_some_and(|d| d.ends_with("contrib")) {
            assert_eq!(open, 0, "{}", p.display());
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn node_test_intermediates_agree_with_onnxruntime() {
    let Some(dir) = corpus() else { return };
    let Some(py) = venv_python() else { return };
    let root = dir.join("onnx_node_tests_1.19.1");
    // Every node output of every node test, computed by onnxruntime on the test's inputs.
    let script = r#"
import sys, os, onnx, numpy as np, onnxruntime as ort
from onnx import helper, numpy_helper
root = sys.argv[1]
for d in sorted(os.listdir(root)):
    path = os.path.join(root, d, 'model.onnx')
    try:
        m = onnx.load(path)
        seen = {o.name for o in m.graph.output}
        for n in m.graph.node:
            for o in n.output:
                if o and o not in seen:
                    m.graph.output.append(onnx.ValueInfoProto(name=o)); seen.add(o)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 4
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
        inits = {x.name for x in m.graph.initializer}
        feeds = {}
        for k, i in enumerate([i for i in m.graph.input if i.name not in inits]):
            t = onnx.TensorProto()
            with open(os.path.join(root, d, 'test_data_set_0', f'input_{k}.pb'), 'rb') as f:
                t.ParseFromString(f.read())
            feeds[i.name] = numpy_helper.to_array(t)
        outs = sess.run(None, feeds)
    except Exception as e:
        print(f'{d}\tSKIP')
        continue
    for o, v in zip(sess.get_outputs(), outs):
        if isinstance(v, np.ndarray):
            print(f'{d}\t{o.name}\t{helper.np_dtype_to_tensor_dtype(v.dtype)}\t' + ','.join(str(x) for x in v.shape))
"#;
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&root)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut runtime: BTreeMap<String, BTreeMap<String, (i32, Vec<i64>)>> = BTreeMap::new();
    let mut skipped = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            [_, "SKIP"] => skipped += 1,
            [model, name, t, d] => {
                let dims = d.split(',').filter_map(|x| x.parse().ok()).collect();
                runtime
                    .entry(model.to_string())
                    .or_default()
                    .insert(name.to_string(), (t.parse().unwrap_or(0), dims));
            }
            _ => {}
        }
    }
    assert!(
        runtime.len() > 1000,
        "onnxruntime ran only {} node tests",
        runtime.len()
    );
    let opts = InferOptions {
        ignore_output_decls: true,
        ..Default::default()
    };
    let (mut agree, mut open, mut wrong) = (0, 0, Vec::new());
    for (model, values) in &runtime {
        let doc = onnx_safeify::load(&root.join(model).join("model.onnx")).unwrap();
        let facts = infer_model(&doc.model, &opts);
        for (i, v) in doc.model.graph.values.iter().enumerate() {
            let Some((t, dims)) = values.get(&*v.name) else {
                continue;
            };
            let info = facts.info(onnx_safeify::ir::ValueId(i as u32));
            // numpy holds float8 / 4-bit types as bytes: only types numpy has are compared.
            if info.dtype.is_some_and(|d| d != *t && d <= 16) {
                wrong.push(format!("{model} {}: {info}, runtime dtype {t}", v.name));
            }
            match info.dims_known() {
                Some(k) if &k == dims => agree += 1,
                Some(_) => wrong.push(format!("{model} {}: {info}, runtime {dims:?}", v.name)),
                None => {
                    if info.shape.as_deref().is_some_and(|s| {
                        s.len() != dims.len()
                            || s.iter()
                                .zip(dims)
                                .any(|(d, &x)| matches!(d, Dim::Known(k) if *k != x))
                    }) {
                        wrong.push(format!("{model} {}: {info}, runtime {dims:?}", v.name));
                    }
                    if std::env::var_os("INFER_VERBOSE").is_some() {
                        eprintln!("open: {model} {} {info}, runtime {dims:?}", v.name);
                    }
                    open += 1;
                }
            }
        }
    }
    eprintln!(
        "node tests through onnxruntime: {} models run ({skipped} not runnable), {agree} values \
         agree, {open} left open, {} wrong",
        runtime.len(),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "disagreements with onnxruntime:\n{}",
        wrong.join("\n")
    );
}
