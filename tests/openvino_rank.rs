//! OpenVINO 2026.4.1's ONNX front end cannot convert a Conv or a Reduce that reads a value of
//! unknown rank, such as the output of an If whose branches yield different ranks (silero-vad).
//! The `openvino-gpu` target cannot pin the If to the CPU, so `openvino-needs-rank` refuses the
//! compile (exit 1, nothing written); an If whose branches agree compiles. Where OpenVINO is
//! installed, the test also checks the premise: the refused model does not load there and the
//! compiled one does.

mod common;
mod runtimes_support;

use std::path::{Path, PathBuf};

use onnx_safeify::verify::RuntimeKind;
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

#[test]
fn an_if_of_unknown_rank_is_refused_for_openvino_gpu() {
    let d = std::env::temp_dir().join(format!("ov_rank_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let Some(models) = models(&d) else {
        eprintln!("SKIPPED: no venv with onnx (run scripts/setup-runtimes.sh)");
        return;
    };
    let openvino = runtimes_support::ready(RuntimeKind::Openvino);
    for (name, m) in &models {
        let out = d.join(format!("{name}.openvino-gpu.onnx"));
        let o = run(
            &[
                m.to_str().unwrap(),
                "--target",
                "openvino-gpu",
                "-o",
                out.to_str().unwrap(),
            ],
            &[],
        );
        let all = format!("{}{}", o.stdout, o.stderr);
        if name == "if_ranks_differ" {
            assert_eq!(o.code, 1, "{name}: {all}");
            assert!(all.contains("openvino-needs-rank"), "{all}");
            assert!(all.contains("branchy"), "the If is named: {all}");
            assert!(!out.exists(), "nothing is written");
            // Other targets compile it (they can pin, or need no rule).
            let o = run(
                &[
                    m.to_str().unwrap(),
                    "--target",
                    "rx580",
                    "-o",
                    d.join("differ.rx580.onnx").to_str().unwrap(),
                ],
                &[],
            );
            assert_eq!(o.code, 0, "{}", o.stderr);
        } else {
            assert_eq!(o.code, 0, "{name}: {all}");
        }
        if openvino {
            // The premise, on OpenVINO itself: the refused model does not load; the other
            // one's output loads and agrees.
            let (c, j, o) = if name == "if_ranks_differ" {
                verify_json(m, m, "openvino", &[])
            } else {
                verify_json(m, &out, "openvino", &[])
            };
            let text = format!("{}{}", o.stdout, o.stderr);
            if name == "if_ranks_differ" {
                assert_ne!(c, 0, "OpenVINO loaded it after all: {text}");
                assert!(text.contains("rank"), "{text}");
            } else {
                assert_eq!(c, 0, "{text}");
                assert!(j.is_some(), "{text}");
            }
        } else {
            eprintln!("SKIPPED (OpenVINO part): no venv with openvino");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}
