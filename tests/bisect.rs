//! `bisect` finds the nodes where a model fails, in about log2(n) runs each: one where ONNX
//! Runtime CPU fails too (it stops there), and two antialias Resize nodes among a hundred on
//! WebGPU (it pins the first to find the second, and its rule makes the model pass).

mod common;
mod runtimes_support;

use std::path::PathBuf;

use onnx_safeify::bisect::{bisect, BisectOptions, CheckStatus, FailKind};
use onnx_safeify::verify::RuntimeKind;

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
    run_python(&py, &script);
    Some(out)
}

/// Runs a model-writing script with the venv's Python; it must succeed.
fn run_python(py: &std::path::Path, script: &str) {
    assert!(std::process::Command::new(py)
        .args(["-c", script])
        .status()
        .expect("python")
        .success());
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
        assert_eq!(r.culprits.len(), 1, "{r:?}");
        let c = &r.culprits[0];
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
        assert!(
            r.runs <= r.run_bound,
            "{} runs, bound {}",
            r.runs,
            r.run_bound
        );
        assert_eq!(r.run_bound, 1 + ceil_log2(n) + 1);
        // The reference fails there too: it cannot be pinned, the search stops, and the final
        // check is not run.
        assert!(
            r.stopped
                .as_deref()
                .unwrap_or("")
                .contains("ONNX Runtime CPU fails"),
            "{:?}",
            r.stopped
        );
        let check = r.rule_check.as_ref().expect("a rule check");
        assert_eq!(check.status, CheckStatus::NotRun, "{check:?}");
        assert_eq!(check.runs, 0);
        let y = r.rule_yaml.as_deref().unwrap();
        assert!(y.contains("op: Gather") && y.contains("action: cpu"), "{y}");
        assert_eq!(r.rules.len(), 1);
        assert_eq!(r.rules[0].fires_on, ["bad_gather"], "{:?}", r.rules);
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
    assert!(r.culprits.is_empty(), "{r:?}");
    assert_eq!(r.runs, 1);
    assert_eq!(r.run_bound, 1);
    assert!(r.rule_yaml.is_none() && r.rule_check.is_none());
}

/// A chain of `total` cheap nodes on a [1, 1, 32, 32] image with three linear downscaling
/// Resize nodes: 'smooth1' (antialias) before node `a`, 'plain' (no antialias, which WebGPU
/// runs) before node `p`, 'smooth2' (antialias) before node `b`.
fn make_two_resizes(
    dir: &std::path::Path,
    a: usize,
    p: usize,
    b: usize,
    total: usize,
) -> Option<PathBuf> {
    let py = common::venv_python()?;
    let out = dir.join(format!("two_resizes_{a}_{b}_{total}.onnx"));
    let script = format!(
        r#"
import onnx, onnx.helper as h
from onnx import TensorProto as T
nodes=[]; prev='x'
def resize(name, aa):
    global prev
    kw = dict(mode='linear')
    if aa: kw['antialias'] = 1
    nodes.append(h.make_node('Resize',[prev,'','half'],[name+'_out'],name=name,**kw)); prev=name+'_out'
for i in range({total}):
    if i == {a}: resize('smooth1', True)
    if i == {p}: resize('plain', False)
    if i == {b}: resize('smooth2', True)
    nodes.append(h.make_node('Abs' if i%2 else 'Neg',[prev],[f'v{{i}}'],name=f'n{{i}}')); prev=f'v{{i}}'
nodes[-1].output[0]='y'
g = h.make_graph(nodes,'g',[h.make_tensor_value_info('x',T.FLOAT,[1,1,32,32])],[h.make_tensor_value_info('y',T.FLOAT,None)],[h.make_tensor('half',T.FLOAT,[4],[1,1,0.5,0.5])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('',19)], ir_version=9), {out:?})
"#
    );
    run_python(&py, &script);
    Some(out)
}

/// Two culprits among 103 nodes on WebGPU: onnxruntime-web does not run antialias Resize. The
/// first found is pinned (out of WebGPU's graph, its output fed from ONNX Runtime CPU) to find
/// the second; within 2·k·log2(n) runs; one rule, `antialias: 1`, that leaves the plain Resize
/// on the GPU; and the model compiled with it (and nothing else) runs faithfully on WebGPU.
#[test]
fn finds_two_culprits_on_webgpu_and_its_rule_fixes_the_model() {
    if !runtimes_support::ready(RuntimeKind::Webgpu) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("bisect_test_webgpu_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (total, a, p, b) = (100, 30, 50, 75);
    let model = make_two_resizes(&dir, a, p, b, total).expect("a venv with onnx");
    // Over the target `none`: the built-in `webgpu` target pins antialias Resize already, and
    // the final check must pass by the suggested rule alone.
    let opts = BisectOptions {
        runtime: "webgpu".into(),
        target: Some("none".into()),
        ..Default::default()
    };
    let r = bisect(&model, &opts).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let n = total + 3;
    assert_eq!(r.nodes, n);
    let names: Vec<&str> = r.culprits.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["smooth1", "smooth2"], "{r:#?}");
    // Node positions: 'smooth1' before n30, 'plain' and 'smooth2' one and two further.
    assert_eq!(r.culprits[0].index, a);
    assert_eq!(r.culprits[1].index, b + 2);
    for c in &r.culprits {
        assert_eq!(c.op, "Resize");
        assert!(c.reference_error.is_none(), "{c:?}");
        assert!(c.attributes.iter().any(|x| x == "antialias=1"), "{c:?}");
        assert!(
            c.message.contains("antialias") || c.class == FailKind::WrongValues,
            "{c:?}"
        );
    }
    assert_eq!(r.culprits[0].inputs[0], "v29: float32[1,1,32,32]");
    assert_eq!(r.culprits[1].inputs[0], "v74: float32[1,1,8,8]");
    assert!(r.stopped.is_none(), "{:?}", r.stopped);
    // The runs: within the issue's 2·k·log2(n), and within the report's own bound.
    let k = r.culprits.len() as f64;
    assert!(
        (r.runs as f64) <= 2.0 * k * (n as f64).log2(),
        "{} runs for {k} culprits among {n} nodes",
        r.runs
    );
    assert!(
        r.runs <= r.run_bound,
        "{} runs, bound {}",
        r.runs,
        r.run_bound
    );
    assert_eq!(r.run_bound, 2 * (1 + ceil_log2(n)) + 1);
    assert_eq!(r.steps.len(), r.runs);
    let last = r.steps.last().unwrap();
    assert!(
        last.nodes == n && last.pinned == 2 && !last.failed,
        "{last:?}"
    );
    // One rule for both, narrow enough to leave 'plain' on WebGPU.
    assert_eq!(r.rules.len(), 1, "{:?}", r.rules);
    assert!(
        r.rules[0].matches.contains("attr: {antialias: 1}"),
        "{:?}",
        r.rules
    );
    assert_eq!(r.rules[0].fires_on, ["smooth1", "smooth2"]);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    // The final check: compiled for webgpu with the rule, it passes on WebGPU.
    let check = r.rule_check.as_ref().expect("a rule check");
    assert_eq!(check.status, CheckStatus::Pass, "{check:?}");
    assert_eq!(check.runs, 1);
    assert_eq!(check.target, "none");
    let text = onnx_safeify::bisect::report_text(&r);
    assert!(
        text.contains("culprit 2 of 2: node #77 'smooth2' (Resize)"),
        "{text}"
    );
    assert!(text.contains("rule check: pass"), "{text}");
    assert!(
        runtimes_support::tagged_processes().is_empty(),
        "processes outlived the command: {:?}",
        runtimes_support::tagged_processes()
    );
}
