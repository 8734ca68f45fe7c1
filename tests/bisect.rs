//! `bisect` finds the node where a model starts to fail, in about log2(n) runs.

mod common;

use std::path::PathBuf;

use onnx_safeify::bisect::{bisect, BisectOptions, FailKind};

fn make(dir: &std::path::Path, bad_at: usize, total: usize) -> Option<PathBuf> {
    let py = common::venv_python()?;
    let out = dir.join(format!("chain_{bad_at}_{total}.onnx"));
    let script = format!(
        r#"
import onnx, onnx.helper as h
from onnx import TensorProto as T
nodes=[]; prev='x'
for i in range({total}):
    if i == {bad_at}:
        nodes.append(h.make_node('Gather',[prev,'idx'],['g'],name='bad_gather',axis=0)); prev='g'
    nodes.append(h.make_node('Relu' if i%2 else 'Neg',[prev],[f'v{{i}}'],name=f'n{{i}}')); prev=f'v{{i}}'
nodes[-1].output[0]='y'
g = h.make_graph(nodes,'g',[h.make_tensor_value_info('x',T.FLOAT,[4,3])],[h.make_tensor_value_info('y',T.FLOAT,None)],[h.make_tensor('idx',T.INT64,[2],[0,10])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('',17)]), {out:?})
"#
    );
    assert!(std::process::Command::new(py)
        .args(["-c", &script])
        .status()
        .expect("python")
        .success());
    Some(out)
}

fn ceil_log2(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

#[test]
fn finds_the_failing_node_in_log2_runs() {
    let dir = std::env::temp_dir().join(format!("bisect_test_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (bad_at, total) in [(20, 40), (3, 60), (57, 60)] {
        let Some(model) = make(&dir, bad_at, total) else {
            eprintln!("SKIPPED: no venv with onnxruntime");
            return;
        };
        let opts = BisectOptions {
            runtime: "ort-ep:CPUExecutionProvider".into(),
            ..Default::default()
        };
        let r = bisect(&model, &opts).unwrap();
        let n = total + 1;
        assert_eq!(r.nodes, n);
        let c = r.culprit.as_ref().expect("a culprit");
        assert_eq!(c.name, "bad_gather", "{r:?}");
        assert_eq!(c.index, bad_at);
        assert_eq!(c.class, FailKind::RunError);
        assert!(c.reference_error.is_some(), "CPU fails there too");
        assert!(
            c.inputs.iter().any(|i| i.contains("[4,3]")),
            "{:?}",
            c.inputs
        );
        assert!(r.runs <= ceil_log2(n) + 2, "{} runs for {n} nodes", r.runs);
        let y = r.rule_yaml.as_deref().unwrap();
        assert!(y.contains("op: Gather") && y.contains("action: cpu"), "{y}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_model_that_runs_has_no_culprit() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no venv with onnxruntime");
        return;
    }
    let opts = BisectOptions {
        runtime: "ort-ep:CPUExecutionProvider".into(),
        ..Default::default()
    };
    let r = bisect(&common::sample(), &opts).unwrap();
    assert!(r.culprit.is_none(), "{r:?}");
    assert_eq!(r.runs, 1);
}
