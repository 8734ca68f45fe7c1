//! The decompositions of com.microsoft RotaryEmbedding and GroupQueryAttention
//! (`src/rewrite/unfuse/rotary.rs`, `src/rewrite/unfuse/gqa.rs`): single-op models built with
//! the venv's onnx (prefill and decode with a past, ragged `seqlens_k`, grouped heads, packed
//! QKV, rotary embedding interleaved or not and partial, a local window, softcap, smooth
//! softmax, head sinks, float16; symbolic and static shapes) are decomposed into standard ONNX,
//! pass `onnx.checker` (full check), and match the original on ONNX Runtime CPU within the
//! `rounding` class (1e-5 of each output's scale for float32, 2 ulp at scale for float16) on
//! inputs that ONNX Runtime accepts; and a small decoder layer compiled for `rx580` through
//! the CLI keeps no attention node on the CPU.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::rewrite::unfuse::{self, UnfuseReport};

const RULE: &str = "test-unfuse-gqa";

/// Builds the cases: `build DIR` writes `NAME.onnx` and `NAME.feeds.npz` (one or more sets of
/// feeds, `setK__input`), and `cases.json` with the operators each case holds.
const BUILD: &str = r#"
import sys, json, os, numpy as np, onnx
from onnx import helper as h, TensorProto as TP
out = sys.argv[1]
rng = np.random.default_rng(7)
cases = {}

def vi(name, tp, shape):
    return h.make_tensor_value_info(name, tp, shape)

def save(name, nodes, inputs, outputs, feed_sets, inits=(), opset=17):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid('', opset), h.make_opsetid('com.microsoft', 1)])
    m.ir_version = 8
    onnx.save(m, os.path.join(out, name + '.onnx'))
    arrays = {}
    for k, feeds in enumerate(feed_sets):
        for n, a in feeds.items():
            arrays[f'set{k}__{n}'] = a
    np.savez(os.path.join(out, name + '.feeds.npz'), **arrays)
    cases[name] = sorted({n.op_type for n in nodes if n.domain == 'com.microsoft'})

def caches(rows, half, dt):
    ang = rng.uniform(0, 6, (rows, half))
    return np.cos(ang).astype(dt), np.sin(ang).astype(dt)

# ---- GroupQueryAttention ------------------------------------------------------------------
def gqa(name, N, Nkv, H, runs, dt=np.float32, attrs=None, packed=False, past=True, rotary=0,
        static=False, sink=False, bias=None, pos_ids=False):
    """runs: list of (B, S, P, seqlens_k, total)."""
    attrs = dict(attrs or {})
    tp = TP.FLOAT16 if dt == np.float16 else TP.FLOAT
    B0, S0, P0 = runs[0][0], runs[0][1], runs[0][2]
    b, s, p = (B0, S0, P0) if static else ('batch', 'seq', 'past')
    width = (N + 2 * Nkv) * H if packed else N * H
    inputs = [vi('q', tp, [b, s, width])]
    names = ['q', '', '']
    if not packed:
        inputs += [vi('k', tp, [b, s, Nkv * H]), vi('v', tp, [b, s, Nkv * H])]
        names = ['q', 'k', 'v']
    if past:
        inputs += [vi('past_key', tp, [b, Nkv, p, H]), vi('past_value', tp, [b, Nkv, p, H])]
        names += ['past_key', 'past_value']
    else:
        names += ['', '']
    inputs += [vi('seqlens_k', TP.INT32, [b]), vi('total_len', TP.INT32, [])]
    names += ['seqlens_k', 'total_len']
    inits = []
    if rotary:
        cos, sin = caches(64, rotary // 2, dt)
        inits += [onnx.numpy_helper.from_array(cos, 'cos_cache'), onnx.numpy_helper.from_array(sin, 'sin_cache')]
        names += ['cos_cache', 'sin_cache']
        attrs['do_rotary'] = 1
    if sink:
        names += [''] * (11 - len(names)) + ['head_sink']
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(N).astype(dt), 'head_sink'))
    if pos_ids:
        names += [''] * (9 - len(names)) + ['position_ids']
        inputs.append(vi('position_ids', TP.INT64, [b, s]))
    if bias:
        names += [''] * (10 - len(names)) + ['attention_bias']
        inputs.append(vi('attention_bias', tp, [1 if bias == 'broadcast' else b, 1 if bias == 'broadcast' else N, s, 'total']))
    node = h.make_node('GroupQueryAttention', names, ['y', 'present_key', 'present_value'],
                       domain='com.microsoft', num_heads=N, kv_num_heads=Nkv, **attrs)
    c = 'present' if not static else max(runs[0][4], P0)
    outputs = [vi('y', tp, [b, s, N * H]), vi('present_key', tp, [b, Nkv, c, H]),
               vi('present_value', tp, [b, Nkv, c, H])]
    sets = []
    for (B, S, P, seqlens, total) in runs:
        f = {'q': rng.standard_normal((B, S, width)).astype(dt)}
        if not packed:
            f['k'] = rng.standard_normal((B, S, Nkv * H)).astype(dt)
            f['v'] = rng.standard_normal((B, S, Nkv * H)).astype(dt)
        if past:
            f['past_key'] = rng.standard_normal((B, Nkv, P, H)).astype(dt)
            f['past_value'] = rng.standard_normal((B, Nkv, P, H)).astype(dt)
        f['seqlens_k'] = np.array(seqlens, np.int32)
        f['total_len'] = np.array(total, np.int32)
        if pos_ids:
            f['position_ids'] = rng.integers(1, 32, (B, S)).astype(np.int64)
        if bias:
            shape = (1, 1, S, total) if bias == 'broadcast' else (B, N, S, total)
            f['attention_bias'] = (2 * rng.standard_normal(shape)).astype(dt)
        sets.append(f)
    save(name, [node], inputs, outputs, sets, inits)

prefill = (2, 5, 0, [4, 4], 5)
decode = (2, 1, 6, [6, 6], 7)
ragged = (2, 1, 6, [6, 3], 7)
padded = (2, 5, 0, [4, 2], 5)
gqa('gqa_prefill_decode', 4, 2, 16, [prefill, decode, ragged, padded])
gqa('gqa_static_prefill', 4, 2, 16, [prefill], static=True)
gqa('gqa_static_decode_ragged', 4, 2, 16, [ragged], static=True)
gqa('gqa_static_prefill_padded', 4, 1, 16, [padded], static=True)
gqa('gqa_mha_heads', 2, 2, 16, [prefill, ragged])
gqa('gqa_no_past', 4, 2, 16, [prefill, padded], past=False)
gqa('gqa_packed', 4, 2, 16, [prefill, ragged], packed=True)
gqa('gqa_subsequent_prompt', 4, 2, 16, [(1, 3, 6, [8], 9), (1, 1, 8, [8], 9)])
gqa('gqa_past_buffer_longer', 4, 2, 16, [(2, 1, 10, [6, 3], 7)])
gqa('gqa_rotary', 4, 2, 16, [prefill, ragged], rotary=16)
gqa('gqa_rotary_interleaved', 4, 2, 16, [prefill, ragged], rotary=16, attrs=dict(rotary_interleaved=1))
gqa('gqa_rotary_partial', 4, 2, 32, [prefill, ragged], rotary=16)
gqa('gqa_rotary_packed', 4, 2, 16, [prefill, ragged], rotary=16, packed=True)
gqa('gqa_window', 4, 2, 16, [(2, 6, 0, [5, 5], 6), (2, 1, 6, [6, 4], 7)], attrs=dict(local_window_size=2))
gqa('gqa_softcap', 4, 2, 16, [prefill, ragged], attrs=dict(softcap=1.5))
gqa('gqa_smooth_softmax', 4, 2, 16, [prefill, ragged], attrs=dict(smooth_softmax=1))
gqa('gqa_head_sink', 4, 2, 16, [prefill, ragged], sink=True)
gqa('gqa_rotary_position_ids', 4, 2, 16, [prefill, ragged, padded, (1, 3, 6, [8], 9)], rotary=16, pos_ids=True)
gqa('gqa_position_ids_without_rotary', 4, 2, 16, [prefill, ragged], pos_ids=True)
gqa('gqa_not_causal', 4, 2, 16, [prefill, ragged, padded, (1, 3, 6, [8], 9)], attrs=dict(causal=0))
gqa('gqa_attention_bias', 4, 2, 16, [prefill, ragged, (2, 1, 10, [6, 3], 7)], bias='full')
gqa('gqa_attention_bias_softcap_broadcast', 4, 2, 16, [prefill, ragged], bias='broadcast', attrs=dict(softcap=1.0))
gqa('gqa_attention_bias_mha', 2, 2, 16, [prefill, ragged], bias='full')
gqa('gqa_fp16_attention_bias', 4, 2, 16, [prefill, ragged], bias='full', dt=np.float16)
gqa('gqa_scale', 4, 2, 16, [prefill, ragged], attrs=dict(scale=0.3))
gqa('gqa_fp16', 4, 2, 16, [prefill, ragged, padded], dt=np.float16)
gqa('gqa_fp16_rotary', 4, 2, 16, [prefill, ragged], dt=np.float16, rotary=16)

# ---- RotaryEmbedding -------------------------------------------------------------------------
def rope(name, B, S, N, H, rd=0, inter=0, pos='2d', four_d=False, dt=np.float32, num_heads=True):
    tp = TP.FLOAT16 if dt == np.float16 else TP.FLOAT
    rot = rd or H
    attrs = dict(interleaved=inter)
    if num_heads:
        attrs['num_heads'] = N
    if rd:
        attrs['rotary_embedding_dim'] = rd
    shape = ['batch', N, 'seq', H] if four_d else ['batch', 'seq', N * H]
    pshape = [1] if pos == 'scalar' else ['batch', 'seq']
    cos, sin = caches(32, rot // 2, dt)
    node = h.make_node('RotaryEmbedding', ['x', 'pos', 'cos_cache', 'sin_cache'], ['y'], domain='com.microsoft', **attrs)
    inputs = [vi('x', tp, shape), vi('pos', TP.INT64, pshape)]
    inits = [onnx.numpy_helper.from_array(cos, 'cos_cache'), onnx.numpy_helper.from_array(sin, 'sin_cache')]
    x = rng.standard_normal((B, N, S, H) if four_d else (B, S, N * H)).astype(dt)
    p = np.array([5], np.int64) if pos == 'scalar' else rng.integers(0, 32, (B, S)).astype(np.int64)
    save(name, [node], inputs, [vi('y', tp, shape)], [{'x': x, 'pos': p}], inits)

rope('rope_3d', 2, 3, 2, 16)
rope('rope_3d_interleaved', 2, 3, 2, 16, inter=1)
rope('rope_3d_scalar_pos', 2, 3, 2, 16, pos='scalar')
rope('rope_3d_no_num_heads', 2, 3, 2, 16, num_heads=False)
rope('rope_4d', 2, 3, 2, 16, four_d=True)
rope('rope_4d_interleaved_scalar_pos', 2, 3, 2, 16, inter=1, pos='scalar', four_d=True)
rope('rope_partial', 2, 3, 2, 16, rd=8)
rope('rope_partial_interleaved', 2, 3, 2, 16, rd=8, inter=1)
rope('rope_partial_4d_scalar_pos', 2, 3, 2, 16, rd=8, pos='scalar', four_d=True)
rope('rope_fp16', 2, 3, 2, 16, dt=np.float16)
rope('rope_fp16_interleaved_4d', 2, 3, 2, 16, inter=1, four_d=True, dt=np.float16)
rope('rope_fp16_partial_scalar_pos', 2, 3, 2, 16, rd=8, pos='scalar', dt=np.float16)

json.dump(cases, open(os.path.join(out, 'cases.json'), 'w'), indent=1)
"#;

/// `compare ORIGINAL REWRITTEN FEEDS`: runs both on ONNX Runtime CPU with every set of feeds;
/// prints the worst error as a fraction of the `rounding` bound (<= 1 passes), per output.
const COMPARE: &str = r#"
import sys, math, numpy as np, onnxruntime as ort
a, b, feeds = sys.argv[1], sys.argv[2], np.load(sys.argv[3])
so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL; so.log_severity_level = 3
sa = ort.InferenceSession(a, so, providers=['CPUExecutionProvider'])
sb = ort.InferenceSession(b, so, providers=['CPUExecutionProvider'])
names = [o.name for o in sa.get_outputs()]
assert names == [o.name for o in sb.get_outputs()], names
sets = sorted({k.split('__')[0] for k in feeds.files})
worst = 0.0
for s in sets:
    f = {k.split('__', 1)[1]: feeds[k] for k in feeds.files if k.startswith(s + '__')}
    ra = sa.run(None, f); rb = sb.run(None, f)
    for n, x, y in zip(names, ra, rb):
        assert x.shape == y.shape, (s, n, x.shape, y.shape)
        assert x.dtype == y.dtype, (s, n, x.dtype, y.dtype)
        if x.size == 0:
            continue
        assert np.isfinite(y).all(), (s, n, 'non-finite output')
        scale = float(np.abs(x.astype(np.float64)).max())
        err = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())
        if x.dtype == np.float16:
            ulp = 2.0 ** (math.floor(math.log2(scale)) - 10) if scale >= 2 ** -14 else 2.0 ** -24
            bound = 2 * ulp
        else:
            bound = 1e-5 * max(scale, 1e-30)
        r = err / bound
        print(f'{s} {n}: err {err:.3e} scale {scale:.3e} -> {r:.3f} of the bound', file=sys.stderr)
        worst = max(worst, r)
print(worst)
"#;

fn python(args: &[&str]) -> String {
    let py = common::venv_python().expect("the test venv (scripts/corpus.sh)");
    let o = Command::new(py).args(args).output().expect("python runs");
    assert!(
        o.status.success(),
        "python {:?} failed:\n{}",
        &args[..args.len().min(1)],
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Unfuse every com.microsoft node of `src`, assert none is left or refused, save into `dir`,
/// run `onnx.checker` (full check) on the result.
fn unfuse_file(src: &Path, dir: &Path) -> (PathBuf, UnfuseReport) {
    let mut doc = onnx_safeify::load(src).unwrap();
    let opset = doc.model.opset("").unwrap_or(0);
    let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| unfuse::is_fused(n, opset));
    assert!(
        report.unsupported.is_empty(),
        "{}: refused {:?}",
        src.display(),
        report.unsupported
    );
    let g = &doc.model.graph;
    for &n in &g.order {
        let node = g.node(n);
        assert!(
            node.domain().is_empty(),
            "{}: {}::{} is left",
            src.display(),
            node.domain(),
            node.op_type
        );
    }
    let out = dir.join(src.file_name().unwrap());
    onnx_safeify::save(&doc, &out).unwrap();
    python(&[
        "-c",
        "import sys, onnx; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)",
        out.to_str().unwrap(),
    ]);
    (out, report)
}

#[test]
fn rotary_and_group_query_attention_decompose_within_rounding() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    let outs = dir.path().join("out");
    std::fs::create_dir_all(&cases).unwrap();
    std::fs::create_dir_all(&outs).unwrap();
    python(&["-c", BUILD, cases.to_str().unwrap()]);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cases.join("cases.json")).unwrap()).unwrap();
    let meta = meta.as_object().unwrap();
    assert!(meta.len() >= 30, "{} cases", meta.len());
    let mut seen = std::collections::BTreeSet::new();
    let mut worst: f64 = 0.0;
    for (name, ops) in meta {
        let src = cases.join(format!("{name}.onnx"));
        let (out, report) = unfuse_file(&src, &outs);
        for op in ops.as_array().unwrap() {
            let op = op.as_str().unwrap();
            assert!(
                report.unfused.iter().any(|u| u.op_type == op),
                "{name}: {op} not decomposed: {report:?}"
            );
            seen.insert(op.to_string());
        }
        let feeds = cases.join(format!("{name}.feeds.npz"));
        let r: f64 = python(&[
            "-c",
            COMPARE,
            src.to_str().unwrap(),
            out.to_str().unwrap(),
            feeds.to_str().unwrap(),
        ])
        .parse()
        .unwrap();
        eprintln!("{name}: worst {r:.3} of the rounding bound");
        assert!(
            r <= 1.0,
            "{name}: {r} times the rounding bound (1e-5 of scale f32, 2 ulp f16)"
        );
        worst = worst.max(r);
    }
    assert!(seen.contains("GroupQueryAttention") && seen.contains("RotaryEmbedding"));
    eprintln!("worst of all cases: {worst:.3} of the rounding bound");
}

/// Configurations outside the decomposition are refused with a reason (the node is kept).
#[test]
fn unsupported_configurations_are_refused_with_a_reason() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let script = r#"
import sys, os, onnx
from onnx import helper as h, TensorProto as TP
out = sys.argv[1]
def vi(n, tp, s): return h.make_tensor_value_info(n, tp, s)
def save(name, node, inputs, outputs):
    g = h.make_graph([node], name, inputs, outputs)
    m = h.make_model(g, opset_imports=[h.make_opsetid('', 17), h.make_opsetid('com.microsoft', 1)])
    onnx.save(m, os.path.join(out, name + '.onnx'))
base = [vi('q', TP.FLOAT, ['b', 's', 64]), vi('k', TP.FLOAT, ['b', 's', 32]), vi('v', TP.FLOAT, ['b', 's', 32]),
        vi('pk', TP.FLOAT, ['b', 2, 'p', 16]), vi('pv', TP.FLOAT, ['b', 2, 'p', 16]),
        vi('sk', TP.INT32, ['b']), vi('tot', TP.INT32, [])]
outs = [vi('y', TP.FLOAT, None), vi('pko', TP.FLOAT, None), vi('pvo', TP.FLOAT, None)]
ins = ['q', 'k', 'v', 'pk', 'pv', 'sk', 'tot']
save('query_seqlens', h.make_node('GroupQueryAttention', ins + [''] * 9 + ['qs'], ['y', 'pko', 'pvo'], domain='com.microsoft',
     num_heads=4, kv_num_heads=2), base + [vi('qs', TP.INT32, ['b'])], outs)
save('qk_output', h.make_node('GroupQueryAttention', ins, ['y', 'pko', 'pvo', 'qk'], domain='com.microsoft',
     num_heads=4, kv_num_heads=2, qk_output=1), base, outs + [vi('qk', TP.FLOAT, None)])
save('window_cache', h.make_node('GroupQueryAttention', ins, ['y', 'pko', 'pvo'], domain='com.microsoft',
     num_heads=4, kv_num_heads=2, local_window_size=4, sliding_window_cache=1), base, outs)
save('packed_batching', h.make_node('RotaryEmbedding', ['x', 'p', 'c', 's'], ['y'], domain='com.microsoft',
     is_packed_batching=1), [vi('x', TP.FLOAT, ['b', 's', 32]), vi('p', TP.INT64, ['b', 's']),
     vi('c', TP.FLOAT, [16, 8]), vi('s', TP.FLOAT, [16, 8])], [vi('y', TP.FLOAT, None)])
"#;
    let dir = tempfile::tempdir().unwrap();
    python(&["-c", script, dir.path().to_str().unwrap()]);
    for (name, want) in [
        ("query_seqlens", "query_seqlens"),
        ("qk_output", "qk_output"),
        ("window_cache", "sliding_window_cache"),
        ("packed_batching", "is_packed_batching"),
    ] {
        let mut doc = onnx_safeify::load(&dir.path().join(format!("{name}.onnx"))).unwrap();
        let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| !n.domain().is_empty());
        assert!(report.unfused.is_empty(), "{name}: {report:?}");
        assert_eq!(report.unsupported.len(), 1, "{name}: {report:?}");
        let reason = &report.unsupported[0].reason;
        assert!(reason.contains(want), "{name}: {reason}");
    }
}

/// A small genai-style decoder layer (projections, RotaryEmbedding on Q and K, GQA with a past,
/// output projection; `seqlens_k` and `total_sequence_length` from the attention mask) compiled
/// for `rx580` through the CLI: no attention node falls back to the CPU, none is left, and the
/// output matches the original on ONNX Runtime CPU for a prefill and a ragged decode step.
#[test]
fn a_decoder_layer_compiled_for_rx580_keeps_its_attention_off_the_cpu() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let script = r#"
import sys, os, numpy as np, onnx
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
out = sys.argv[1]
rng = np.random.default_rng(3)
D, N, Nkv, H = 64, 4, 2, 16
def w(name, *shape): return nh.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
ang = np.arange(64)[:, None] * (10000.0 ** (-np.arange(H // 2) / (H // 2)))[None]
inits = [w('wq', D, N * H), w('wk', D, Nkv * H), w('wv', D, Nkv * H), w('wo', N * H, D),
         nh.from_array(np.cos(ang).astype(np.float32), 'cos'), nh.from_array(np.sin(ang).astype(np.float32), 'sin'),
         nh.from_array(np.array([1], np.int64), 'axis1'), nh.from_array(np.array(1, np.int64), 'one'),
         nh.from_array(np.array([1], np.int64), 'idx1')]
nodes = [
    h.make_node('MatMul', ['x', 'wq'], ['q']), h.make_node('MatMul', ['x', 'wk'], ['k']), h.make_node('MatMul', ['x', 'wv'], ['v']),
    h.make_node('RotaryEmbedding', ['q', 'position_ids', 'cos', 'sin'], ['qr'], domain='com.microsoft', num_heads=N),
    h.make_node('RotaryEmbedding', ['k', 'position_ids', 'cos', 'sin'], ['kr'], domain='com.microsoft', num_heads=Nkv),
    h.make_node('ReduceSum', ['attention_mask', 'axis1'], ['msum'], keepdims=0),
    h.make_node('Sub', ['msum', 'one'], ['msub']),
    h.make_node('Cast', ['msub'], ['seqlens_k'], to=TP.INT32),
    h.make_node('Shape', ['attention_mask'], ['mshape']),
    h.make_node('Gather', ['mshape', 'idx1'], ['tot64'], axis=0),
    h.make_node('Cast', ['tot64'], ['tot32'], to=TP.INT32),
    h.make_node('Squeeze', ['tot32'], ['total_len']),
    h.make_node('GroupQueryAttention', ['qr', 'kr', 'v', 'past_key', 'past_value', 'seqlens_k', 'total_len'],
                ['attn', 'present_key', 'present_value'], domain='com.microsoft', num_heads=N, kv_num_heads=Nkv),
    h.make_node('MatMul', ['attn', 'wo'], ['y']),
]
inputs = [h.make_tensor_value_info('x', TP.FLOAT, ['batch', 'seq', D]),
          h.make_tensor_value_info('position_ids', TP.INT64, ['batch', 'seq']),
          h.make_tensor_value_info('attention_mask', TP.INT64, ['batch', 'total']),
          h.make_tensor_value_info('past_key', TP.FLOAT, ['batch', Nkv, 'past', H]),
          h.make_tensor_value_info('past_value', TP.FLOAT, ['batch', Nkv, 'past', H])]
outputs = [h.make_tensor_value_info('y', TP.FLOAT, ['batch', 'seq', D]),
           h.make_tensor_value_info('present_key', TP.FLOAT, ['batch', Nkv, 'total', H]),
           h.make_tensor_value_info('present_value', TP.FLOAT, ['batch', Nkv, 'total', H])]
m = h.make_model(h.make_graph(nodes, 'layer', inputs, outputs, initializer=inits),
                 opset_imports=[h.make_opsetid('', 17), h.make_opsetid('com.microsoft', 1)])
m.ir_version = 8
onnx.save(m, os.path.join(out, 'layer.onnx'))
# Prefill of 5 tokens (batch 2), then a decode step where entry 1 has 2 fewer tokens.
sets = {}
def add(k, f):
    for n, a in f.items(): sets[f'set{k}__{n}'] = a
add(0, dict(x=rng.standard_normal((2, 5, D)).astype(np.float32),
            position_ids=np.tile(np.arange(5), (2, 1)).astype(np.int64),
            attention_mask=np.ones((2, 5), np.int64),
            past_key=np.zeros((2, Nkv, 0, H), np.float32), past_value=np.zeros((2, Nkv, 0, H), np.float32)))
mask = np.ones((2, 7), np.int64); mask[1, 4:] = 0
add(1, dict(x=rng.standard_normal((2, 1, D)).astype(np.float32),
            position_ids=np.array([[6], [3]], np.int64), attention_mask=mask,
            past_key=rng.standard_normal((2, Nkv, 6, H)).astype(np.float32),
            past_value=rng.standard_normal((2, Nkv, 6, H)).astype(np.float32)))
np.savez(os.path.join(out, 'layer.feeds.npz'), **sets)
"#;
    let dir = tempfile::tempdir().unwrap();
    python(&["-c", script, dir.path().to_str().unwrap()]);
    let src = dir.path().join("layer.onnx");
    let out = dir.path().join("layer.rx580.onnx");
    let report = dir.path().join("layer.rx580.json");
    let o = Command::new(common::bin())
        .arg(&src)
        .args(["--target", "rx580", "-o"])
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let attention_ops = ["GroupQueryAttention", "RotaryEmbedding"];
    for f in r["fallbacks"].as_array().unwrap() {
        let op = f["op"].as_str().unwrap_or_default();
        assert!(
            !attention_ops.iter().any(|a| op.contains(a)),
            "the attention fell back: {f:#}"
        );
    }
    for a in attention_ops {
        let n = r["applied"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["action"] == "unfuse" && x["op"].as_str().unwrap_or_default().contains(a))
            .count();
        let want = if a == "RotaryEmbedding" { 2 } else { 1 };
        assert_eq!(n, want, "{a} decomposed {n} times: {r:#}");
    }
    let doc = onnx_safeify::load(&out).unwrap();
    let g = &doc.model.graph;
    for &n in &g.order {
        assert!(
            g.node(n).domain().is_empty(),
            "{}::{} is left",
            g.node(n).domain(),
            g.node(n).op_type
        );
    }
    let feeds = dir.path().join("layer.feeds.npz");
    let worst: f64 = python(&[
        "-c",
        COMPARE,
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        feeds.to_str().unwrap(),
    ])
    .parse()
    .unwrap();
    eprintln!("decoder layer on rx580: worst {worst:.3} of the rounding bound");
    assert!(worst <= 1.0, "{worst} times the rounding bound");
}
