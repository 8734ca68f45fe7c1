//! Decompositions of the remaining transformer contrib ops (issue 34 part 3):
//! `Attention` with past state (`src/rewrite/unfuse/attention_past.rs`: GPT-2's
//! `past [2, B, N, P, H]` -> `present`, causal over past + current, 2-D and 1-D masks),
//! `MultiHeadAttention` with `past_key`/`past_value` (BNSH), and `EmbedLayerNormalization` /
//! `QEmbedLayerNormalization` (`embed_layer_norm.rs`: segment ids, mask index, position ids,
//! embedding sum, int8 and uint8 tables). Single-op models built with the venv's onnx are
//! decomposed into standard ONNX, pass `onnx.checker` (full check), and match the original on
//! ONNX Runtime CPU within the `rounding` class (1e-5 of each output's scale for float32) on
//! several sets of valid inputs (prefill, decode, padded rows). The corpus models that hold
//! these ops compile for `rx580` through the CLI, keep the ops off the CPU, and `verify` with
//! their own inputs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::rewrite::unfuse::{self, UnfuseReport};

const RULE: &str = "test-unfuse-transformer-ops";

/// `build DIR` writes `NAME.onnx`, `NAME.feeds.npz` (sets `setK__input`) and `cases.json`.
const BUILD: &str = r#"
import sys, json, os, numpy as np, onnx
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
out = sys.argv[1]
rng = np.random.default_rng(11)
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

def mask2d(B, T, pad):
    m = np.ones((B, T), np.int32)
    if pad and B > 1:
        m[1, :pad] = 0  # left padding of row 1
    return m

# ---- Attention with past (GPT-2) ------------------------------------------------------------
def attn_past(name, N, H, runs, uni=1, mask='2d', bias=True, attrs=None, opset=17, static=False, batch=None):
    """runs: list of (B, S, P, pad)."""
    D = N * H
    attrs = dict(attrs or {})
    b, s, p, t = ('batch', 'seq', 'past', 'total')
    if static:
        B0, S0, P0 = runs[0][:3]
        b, s, p, t = B0, S0, P0, P0 + S0
    if batch:
        b = batch  # a 1-D mask is told from [2B] by the static batch
    inits = [nh.from_array((rng.standard_normal((D, 3 * D)) * 0.3).astype(np.float32), 'w')]
    names = ['x', 'w']
    if bias:
        inits.append(nh.from_array((rng.standard_normal(3 * D) * 0.3).astype(np.float32), 'b'))
        names.append('b')
    else:
        names.append('')
    inputs = [vi('x', TP.FLOAT, [b, s, D])]
    if mask == '2d':
        names.append('mask'); inputs.append(vi('mask', TP.INT32, [b, t]))
    elif mask == '1d':
        names.append('mask'); inputs.append(vi('mask', TP.INT32, [b]))
    elif mask == '1d_start':
        names.append('mask'); inputs.append(vi('mask', TP.INT32, [2 * b]))
    elif mask == '3d':
        names.append('mask'); inputs.append(vi('mask', TP.INT32, [b, s, t]))
    else:
        names.append('')
    names.append('past'); inputs.append(vi('past', TP.FLOAT, [2, b, N, p, H]))
    node = h.make_node('Attention', names, ['y', 'present'], domain='com.microsoft',
                       num_heads=N, unidirectional=uni, **attrs)
    outputs = [vi('y', TP.FLOAT, [b, s, D]), vi('present', TP.FLOAT, [2, b, N, t, H])]
    sets = []
    for (B, S, P, pad) in runs:
        f = {'x': rng.standard_normal((B, S, D)).astype(np.float32),
             'past': rng.standard_normal((2, B, N, P, H)).astype(np.float32)}
        if mask == '2d':
            f['mask'] = mask2d(B, P + S, pad)
        elif mask == '1d':
            f['mask'] = np.array([P + S - i for i in range(B)], np.int32)
        elif mask == '1d_start':
            f['mask'] = np.array([P + S - i for i in range(B)] + [min(i + pad, P + S) for i in range(B)], np.int32)
        elif mask == '3d':
            f['mask'] = (rng.random((B, S, P + S)) > 0.3).astype(np.int32)
        sets.append(f)
    save(name, [node], inputs, outputs, sets, inits, opset)

decode = (2, 1, 6, 2)
chunk = (2, 3, 4, 1)
first = (2, 4, 0, 0)
padded_first = (2, 4, 0, 2)  # rows 0-1 of entry 1 see only masked keys
attn_past('attn_past_gpt2', 4, 16, [decode, chunk, first, padded_first])
attn_past('attn_past_no_mask', 4, 16, [decode, chunk])
attn_past('attn_past_no_mask_no_bias', 2, 8, [decode, chunk], mask='none', bias=False)
attn_past('attn_past_bidirectional', 4, 16, [decode, chunk], uni=0)
attn_past('attn_past_key_lengths', 4, 16, [decode, chunk], mask='1d', batch=2)
attn_past('attn_past_end_start', 4, 16, [decode, chunk, padded_first], mask='1d_start', batch=2)
attn_past('attn_past_mask_3d_causal', 4, 16, [decode, chunk, first], mask='3d')
attn_past('attn_past_mask_3d', 4, 16, [decode, chunk], mask='3d', uni=0)
attn_past('attn_past_scale_filter', 4, 16, [decode, chunk], attrs=dict(scale=0.2, mask_filter_value=-1000.0))
attn_past('attn_past_static', 4, 16, [chunk], static=True)
attn_past('attn_past_opset13', 4, 16, [decode, chunk], opset=13)

# ---- MultiHeadAttention with past_key / past_value --------------------------------------------
def mha_past(name, N, H, runs, uni=0, mask=True, bias=True):
    D = N * H
    names = ['q', 'k', 'v']
    inputs = [vi('q', TP.FLOAT, ['batch', 'seq', D]), vi('k', TP.FLOAT, ['batch', 'seq', D]),
              vi('v', TP.FLOAT, ['batch', 'seq', D])]
    inits = []
    if bias:
        inits.append(nh.from_array((rng.standard_normal(3 * D) * 0.3).astype(np.float32), 'bias'))
        names.append('bias')
    else:
        names.append('')
    if mask:
        names.append('mask'); inputs.append(vi('mask', TP.INT32, ['batch', 'total']))
    else:
        names.append('')
    names += ['', 'past_key', 'past_value']
    inputs += [vi('past_key', TP.FLOAT, ['batch', N, 'past', H]), vi('past_value', TP.FLOAT, ['batch', N, 'past', H])]
    node = h.make_node('MultiHeadAttention', names, ['y', 'present_key', 'present_value'],
                       domain='com.microsoft', num_heads=N, unidirectional=uni)
    outputs = [vi('y', TP.FLOAT, ['batch', 'seq', D]), vi('present_key', TP.FLOAT, ['batch', N, 'total', H]),
               vi('present_value', TP.FLOAT, ['batch', N, 'total', H])]
    sets = []
    for (B, S, P, pad) in runs:
        f = {n: rng.standard_normal((B, S, D)).astype(np.float32) for n in ('q', 'k', 'v')}
        f['past_key'] = rng.standard_normal((B, N, P, H)).astype(np.float32)
        f['past_value'] = rng.standard_normal((B, N, P, H)).astype(np.float32)
        if mask:
            f['mask'] = mask2d(B, P + S, pad)
        sets.append(f)
    save(name, [node], inputs, outputs, sets, inits)

mha_past('mha_past', 4, 16, [decode, chunk])
mha_past('mha_past_causal', 4, 16, [decode, chunk, padded_first], uni=1)
mha_past('mha_past_no_mask_no_bias', 2, 8, [decode, chunk], mask=False, bias=False)

# ---- EmbedLayerNormalization / QEmbedLayerNormalization --------------------------------------
V, P_MAX, G, HID = 50, 16, 2, 32

def tables():
    return dict(word=rng.standard_normal((V, HID)).astype(np.float32),
                pos=rng.standard_normal((P_MAX, HID)).astype(np.float32),
                seg=rng.standard_normal((G, HID)).astype(np.float32),
                gamma=(1 + 0.3 * rng.standard_normal(HID)).astype(np.float32),
                beta=(0.3 * rng.standard_normal(HID)).astype(np.float32))

def emb_feeds(runs, segment, mask, pos_ids):
    sets = []
    for (B, S) in runs:
        f = {'ids': rng.integers(0, V, (B, S)).astype(np.int32)}
        if segment:
            f['seg_ids'] = rng.integers(0, G, (B, S)).astype(np.int32)
        if mask:
            m = np.ones((B, S), np.int32); m[-1, S // 2:] = 0
            f['mask'] = m
        if pos_ids == 'full':
            f['pos_ids'] = rng.integers(0, P_MAX, (B, S)).astype(np.int32)
        elif pos_ids == 'broadcast':
            f['pos_ids'] = rng.integers(0, P_MAX, (1, S)).astype(np.int32)
        sets.append(f)
    return sets

def embed(name, segment=True, mask=True, pos_ids=None, emb_sum=False, mask_out=True):
    t = tables()
    inits = [nh.from_array(t['word'], 'word'), nh.from_array(t['pos'], 'pos'), nh.from_array(t['gamma'], 'gamma'),
             nh.from_array(t['beta'], 'beta')]
    inputs = [vi('ids', TP.INT32, ['batch', 'seq'])]
    names = ['ids', 'seg_ids' if segment else '', 'word', 'pos', 'seg' if segment else '', 'gamma', 'beta']
    if segment:
        inits.append(nh.from_array(t['seg'], 'seg')); inputs.append(vi('seg_ids', TP.INT32, ['batch', 'seq']))
    names.append('mask' if mask else '')
    if mask:
        inputs.append(vi('mask', TP.INT32, ['batch', 'seq']))
    if pos_ids:
        names.append('pos_ids')
        inputs.append(vi('pos_ids', TP.INT32, [1 if pos_ids == 'broadcast' else 'batch', 'seq']))
    # ONNX Runtime's type inference always writes output 1: unused, it is no graph output.
    outs = ['y', 'mask_index']
    outputs = [vi('y', TP.FLOAT, ['batch', 'seq', HID])]
    if mask_out:
        outputs.append(vi('mask_index', TP.INT32, ['batch']))
    if emb_sum:
        outs.append('emb_sum'); outputs.append(vi('emb_sum', TP.FLOAT, ['batch', 'seq', HID]))
    while outs and outs[-1] == '':
        outs.pop()
    node = h.make_node('EmbedLayerNormalization', names, outs, domain='com.microsoft', epsilon=1e-12)
    save(name, [node], inputs, outputs, emb_feeds([(2, 8), (3, 5)], segment, mask, pos_ids), inits)

embed('embed_ln_bert')
embed('embed_ln_no_mask')
embed('embed_ln_no_segment_no_mask', segment=False, mask=False)
embed('embed_ln_position_ids', pos_ids='full', emb_sum=True)
embed('embed_ln_position_ids_broadcast', pos_ids='broadcast', mask=False)
embed('embed_ln_output_only', mask_out=False)

def qembed(name, signed, segment=True, mask=True):
    t = tables()
    qt = np.int8 if signed else np.uint8
    lo, hi = (-128, 127) if signed else (0, 255)
    inits, names = [], ['ids', 'seg_ids' if segment else '']
    scales, zps = [], []
    for k in ['word', 'pos', 'seg', 'gamma', 'beta']:
        a = t[k]
        if k == 'seg' and not segment:
            names.append(''); scales.append(''); zps.append(''); continue
        sc = np.float32((a.max() - a.min()) / 255.0)
        zp = qt(np.clip(np.round(lo - a.min() / sc), lo, hi))
        q = np.clip(np.round(a / sc) + int(zp), lo, hi).astype(qt)
        inits += [nh.from_array(q, k + '_q'), nh.from_array(np.array(sc, np.float32), k + '_scale'),
                  nh.from_array(np.array(zp, qt), k + '_zp')]
        names.append(k + '_q'); scales.append(k + '_scale'); zps.append(k + '_zp')
    names.append('mask' if mask else '')
    names += scales + zps
    inputs = [vi('ids', TP.INT32, ['batch', 'seq'])]
    if segment:
        inputs.append(vi('seg_ids', TP.INT32, ['batch', 'seq']))
    if mask:
        inputs.append(vi('mask', TP.INT32, ['batch', 'seq']))
    node = h.make_node('QEmbedLayerNormalization', names, ['y', 'mask_index'], domain='com.microsoft', epsilon=1e-12)
    outputs = [vi('y', TP.FLOAT, ['batch', 'seq', HID]), vi('mask_index', TP.INT32, ['batch'])]
    save(name, [node], inputs, outputs, emb_feeds([(2, 8), (3, 5)], segment, mask, None), inits)

qembed('qembed_ln_uint8', False)
qembed('qembed_ln_int8', True)
qembed('qembed_ln_no_segment', False, segment=False, mask=False)

json.dump(cases, open(os.path.join(out, 'cases.json'), 'w'), indent=1)
"#;

/// `compare ORIGINAL REWRITTEN FEEDS`: both on ONNX Runtime CPU with every set of feeds; prints
/// the worst error as a fraction of the `rounding` bound (<= 1 passes); integer outputs must be
/// equal.
const COMPARE: &str = r#"
import sys, numpy as np, onnxruntime as ort
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
        if x.dtype.kind in 'iub':
            assert (x == y).all(), (s, n, x, y)
            continue
        assert np.isfinite(y).all(), (s, n, 'non-finite output')
        scale = float(np.abs(x.astype(np.float64)).max())
        err = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())
        r = err / (1e-5 * max(scale, 1e-30))
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
fn attention_with_past_and_embed_layer_norm_decompose_within_rounding() {
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
    assert!(meta.len() >= 18, "{} cases", meta.len());
    let mut seen = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
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
        if r > 1.0 {
            failures.push(format!("{name}: {r:.3} times the rounding bound"));
        }
    }
    for op in [
        "Attention",
        "MultiHeadAttention",
        "EmbedLayerNormalization",
        "QEmbedLayerNormalization",
    ] {
        assert!(seen.contains(op), "no case decomposed {op}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Configurations outside the decompositions are refused with a reason (the node is kept).
#[test]
fn unsupported_past_configurations_are_refused_with_a_reason() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let script = r#"
import sys, os, numpy as np, onnx
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
out = sys.argv[1]
def vi(n, tp, s): return h.make_tensor_value_info(n, tp, s)
def save(name, node, inputs, outputs, inits=()):
    g = h.make_graph([node], name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid('', 17), h.make_opsetid('com.microsoft', 1)])
    onnx.save(m, os.path.join(out, name + '.onnx'))
w = nh.from_array(np.zeros((32, 96), np.float32), 'w')
x = vi('x', TP.FLOAT, ['b', 's', 32])
past = vi('past', TP.FLOAT, [2, 'b', 4, 'p', 8])
outs = [vi('y', TP.FLOAT, None), vi('present', TP.FLOAT, None)]
save('share_buffer', h.make_node('Attention', ['x', 'w', '', '', 'past', '', 'pl'], ['y', 'present'], domain='com.microsoft',
     num_heads=4, past_present_share_buffer=1), [x, past, vi('pl', TP.INT32, [1])], outs, [w])
save('mask_4d', h.make_node('Attention', ['x', 'w', '', 'm', 'past'], ['y', 'present'], domain='com.microsoft',
     num_heads=4, unidirectional=1), [x, past, vi('m', TP.INT32, ['b', 1, 'm', 'm'])], outs, [w])
save('mask_1d_dynamic_batch', h.make_node('Attention', ['x', 'w', '', 'm', 'past'], ['y', 'present'], domain='com.microsoft',
     num_heads=4, unidirectional=1), [x, past, vi('m', TP.INT32, ['mb'])], outs, [w])
save('rotary', h.make_node('Attention', ['x', 'w', '', '', 'past'], ['y', 'present'], domain='com.microsoft',
     num_heads=4, do_rotary=1), [x, past], outs, [w])
save('mha_cache_indirection', h.make_node('MultiHeadAttention', ['x', 'x', 'x', '', '', '', 'pk', 'pv', '', 'ci'],
     ['y', 'pko', 'pvo'], domain='com.microsoft', num_heads=4),
     [x, vi('pk', TP.FLOAT, ['b', 4, 'p', 8]), vi('pv', TP.FLOAT, ['b', 4, 'p', 8]), vi('ci', TP.INT32, ['b', 1, 8])],
     [vi('y', TP.FLOAT, None), vi('pko', TP.FLOAT, None), vi('pvo', TP.FLOAT, None)])
"#;
    let dir = tempfile::tempdir().unwrap();
    python(&["-c", script, dir.path().to_str().unwrap()]);
    for (name, want) in [
        ("share_buffer", "past_present_share_buffer"),
        ("mask_4d", "4-D mask"),
        ("mask_1d_dynamic_batch", "static batch"),
        ("rotary", "do_rotary"),
        ("mha_cache_indirection", "cache_indirection"),
    ] {
        let mut doc = onnx_safeify::load(&dir.path().join(format!("{name}.onnx"))).unwrap();
        let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| !n.domain().is_empty());
        assert!(report.unfused.is_empty(), "{name}: {report:?}");
        assert_eq!(report.unsupported.len(), 1, "{name}: {report:?}");
        let reason = &report.unsupported[0].reason;
        assert!(reason.contains(want), "{name}: {reason}");
    }
}

/// The corpus models holding these ops (GPT-2 with past, its beam search, fused BERT and its
/// int8 form), compiled for `rx580` through the CLI: no fallback names the ops, and `verify`
/// with the model's own inputs passes.
#[test]
fn corpus_models_compile_for_rx580_and_verify() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ops = [
        "Attention",
        "MultiHeadAttention",
        "EmbedLayerNormalization",
        "QEmbedLayerNormalization",
    ];
    let mut failures = Vec::new();
    let mut tried = 0;
    for stem in [
        "gpt2_past",
        "gpt2_beam_search",
        "bert_fused",
        "bert_fused_int8",
    ] {
        let model = corpus.join("transformers").join(format!("{stem}.onnx"));
        if !model.exists() {
            eprintln!("MISSING corpus model {}: skipped", model.display());
            continue;
        }
        tried += 1;
        let out = dir.path().join(format!("{stem}.rx580.onnx"));
        let report = dir.path().join(format!("{stem}.rx580.json"));
        let mut cmd = Command::new(common::bin());
        cmd.arg(&model)
            .args(["--target", "rx580", "-o"])
            .arg(&out)
            .arg("--report")
            .arg(&report);
        // In the int8 model the decompositions' outputs are quantized again downstream
        // (DynamicQuantizeMatMul), which makes them approximate: allowed here, where the test
        // is that they apply (tests/transformers_corpus.rs holds the default).
        if stem.ends_with("_int8") {
            cmd.arg("--allow-approximate");
        }
        let o = cmd.output().unwrap();
        if o.status.code() != Some(0) {
            failures.push(format!(
                "{stem}: compile exit {:?}: {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            ));
            continue;
        }
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        for f in r["fallbacks"].as_array().into_iter().flatten() {
            let op = f["op"].as_str().unwrap_or_default();
            if ops.iter().any(|a| op.ends_with(a)) {
                failures.push(format!("{stem}: {op} fell back: {f}"));
            }
        }
        let inputs = model.with_file_name(format!("{stem}.inputs.npz"));
        let v = Command::new(common::bin())
            .arg("verify")
            .arg(&model)
            .arg(&out)
            .arg("--inputs")
            .arg(&inputs)
            .output()
            .unwrap();
        if !v.status.success() {
            failures.push(format!(
                "{stem}: verify exit {:?}: {}{}",
                v.status.code(),
                String::from_utf8_lossy(&v.stdout),
                String::from_utf8_lossy(&v.stderr)
            ));
        }
    }
    assert!(tried > 0, "none of the corpus models is there");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
