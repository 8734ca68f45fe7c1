//! Inference never panics, however malformed the model: every backend node test and the
//! real models are mutated (attributes set to extreme values, declared input shapes made
//! absurd, initializer contents and dims changed, operators swapped for others) with a
//! fixed seed, and inference runs on each mutant.

use std::path::PathBuf;

use onnx_safeify::infer::{infer_model, InferOptions};
use onnx_safeify::ir::Model;
use onnx_safeify::proto::{tensor_shape_proto::dimension, type_proto};

/// A small deterministic generator (64-bit LCG, high bits).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn int(&mut self) -> i64 {
        const V: [i64; 12] = [
            0,
            1,
            -1,
            2,
            3,
            -2,
            7,
            4096,
            i64::MAX,
            i64::MIN,
            1 << 31,
            (1 << 62) + 1,
        ];
        V[self.below(V.len())]
    }
    fn float(&mut self) -> f32 {
        const V: [f32; 8] = [0.0, -0.0, 1.0, -1.0, 0.5, f32::NAN, f32::INFINITY, 1e30];
        V[self.below(V.len())]
    }
}

const OPS: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "Reshape",
    "Slice",
    "Gather",
    "Concat",
    "Split",
    "Squeeze",
    "Unsqueeze",
    "Resize",
    "Expand",
    "Tile",
    "Pad",
    "Range",
    "Transpose",
    "Flatten",
    "MatMul",
    "Gemm",
    "Einsum",
    "TopK",
    "OneHot",
    "ConstantOfShape",
    "Shape",
    "ReduceSum",
    "Where",
    "Add",
    "Cast",
    "LayerNormalization",
    "Attention",
    "LSTM",
    "DepthToSpace",
    "GridSample",
    "Upsample",
    "If",
];

fn mutate(model: &mut Model, rng: &mut Rng) {
    let g = &mut model.graph;
    let order = g.order.clone();
    for &n in &order {
        let node = g.node_mut(n);
        if rng.below(6) == 0 {
            node.op_type = OPS[rng.below(OPS.len())].to_string();
        }
        for a in node.attributes.make_mut() {
            // The message is mutated and the attribute rebuilt from it (graphs kept).
            let mut p = a.to_proto();
            match rng.below(4) {
                0 => {
                    if p.i.is_some() {
                        p.i = Some(rng.int());
                    }
                    if p.f.is_some() {
                        p.f = Some(rng.float());
                    }
                }
                1 if !p.ints.is_empty() => {
                    let i = rng.below(p.ints.len());
                    p.ints[i] = rng.int();
                }
                2 => {
                    let extra = rng.below(4);
                    for _ in 0..extra {
                        p.ints.push(rng.int());
                        p.floats.push(rng.float());
                    }
                }
                _ => continue,
            }
            let g = a.g().cloned().map(Box::new);
            *a = onnx_safeify::ir::Attribute::with_graphs(p, g, a.graphs().to_vec());
        }
    }
    for vi in &mut g.inputs {
        let Some(type_proto::Value::TensorType(t)) =
            vi.proto.r#type.as_mut().and_then(|t| t.value.as_mut())
        else {
            continue;
        };
        match rng.below(5) {
            0 => t.shape = None,
            1 => {
                if let Some(s) = t.shape.as_mut() {
                    for d in &mut s.dim {
                        d.value = Some(dimension::Value::DimValue(rng.int()));
                    }
                }
            }
            2 => {
                if let Some(s) = t.shape.as_mut() {
                    let n = 40 + rng.below(40);
                    let d = s.dim.first().cloned().unwrap_or_default();
                    s.dim.extend(std::iter::repeat_n(d, n));
                }
            }
            3 => t.elem_type = Some(rng.int() as i32),
            _ => {}
        }
    }
    for init in &mut g.initializers {
        match rng.below(4) {
            0 => {
                for v in &mut init.tensor.rest_mut().int64_data {
                    *v = rng.int();
                }
            }
            1 => {
                if let Some(d) = init.tensor.dims.first_mut() {
                    *d = rng.int();
                }
            }
            2 => init.tensor.data_type = Some(rng.below(30) as i32),
            _ => {}
        }
    }
}

fn corpus() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let dir = std::env::var_os("ONNX_SAFEIFY_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/onnx-safeify/corpus"));
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

fn run_mutants(path: &std::path::Path, count: usize, rng: &mut Rng) -> usize {
    let Ok(doc) = onnx_safeify::load(path) else {
        return 0;
    };
    for _ in 0..count {
        let mut m = doc.model.clone();
        mutate(&mut m, rng);
        let r = std::panic::catch_unwind(|| {
            infer_model(&m, &InferOptions::default());
        });
        assert!(
            r.is_ok(),
            "inference panicked on a mutant of {}",
            path.display()
        );
    }
    count
}

#[test]
fn mutated_node_tests_never_panic() {
    let Some(dir) = corpus() else { return };
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir.join("onnx_node_tests_1.19.1"))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("model.onnx")))
        .filter(|p| p.is_file())
        .collect();
    cases.sort();
    let mut rng = Rng(0x5eed);
    let n: usize = cases.iter().map(|p| run_mutants(p, 12, &mut rng)).sum();
    eprintln!(
        "{n} mutants of {} node tests inferred without a panic",
        cases.len()
    );
}

#[test]
fn mutated_real_models_never_panic() {
    let Some(dir) = corpus() else { return };
    let mut files = Vec::new();
    for sub in ["real", "ort_optimized", "contrib"] {
        if let Ok(rd) = std::fs::read_dir(dir.join(sub)) {
            files.extend(
                rd.filter_map(|e| Some(e.ok()?.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "onnx")),
            );
        }
    }
    files.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx"));
    files.sort();
    let mut rng = Rng(0xfeed);
    let n: usize = files.iter().map(|p| run_mutants(p, 4, &mut rng)).sum();
    eprintln!(
        "{n} mutants of {} real models inferred without a panic",
        files.len()
    );
}
