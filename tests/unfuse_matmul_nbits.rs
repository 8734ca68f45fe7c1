//! com.microsoft MatMulNBits decomposed into standard ONNX (src/rewrite/unfuse/matmul_nbits.rs):
//! models that ONNX Runtime's `MatMulNBitsQuantizer` makes from float MatMuls (2, 4 and 8 bits;
//! block sizes 16, 32 and 128; with and without zero points; K a multiple of the block size or
//! not; float32 and float16; opsets 17, 21 and 25; a bias; accuracy_level 4) and hand-made nodes
//! (float zero points, g_idx) decompose in the form their opset allows (packed through blocked
//! DequantizeLinear from opset 21, unpacked below), pass `onnx.checker` (full check) and match
//! the original on ONNX Runtime CPU within the class the patch declares (`rounding`, or
//! `approximate` for accuracy_level 4). Refusals name their reason, and the `rx580` compile then
//! pins the node to the CPU. A 4096 x 4096 int4 weight with external data shows the two forms'
//! sizes.
//!
//! Run: `cargo test --locked --test unfuse_matmul_nbits -- --nocapture` (needs the test venv of
//! `scripts/corpus.sh`: onnx, onnxruntime, numpy).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use onnx_safeify::engine::{self, Options};
use onnx_safeify::rewrite::unfuse::{self, matmul_nbits::FORM_KEY, UnfuseOptions, UnfuseReport};
use onnx_safeify::rewrite::Exactness;

const RULE: &str = "test-unfuse-matmul-nbits";

/// Builds the models and compares them on ONNX Runtime (written to the test's folder).
const SCRIPT: &str = r##""""MatMulNBits test models and their comparison on ONNX Runtime CPU (tests/unfuse_matmul_nbits.rs).

build DIR: float MatMul models quantized by ONNX Runtime's MatMulNBitsQuantizer (2/4/8 bits, block
sizes 16/32/128, with and without zero points, K a multiple of the block size or not, float32 and
float16, opsets 17/21/25, a bias folded into the node, accuracy_level 4) and hand-made nodes (float
zero points, g_idx); DIR/cases.json lists them with the form each should take.
compare PAIRS.json: for each [original, rewritten], the largest difference on ONNX Runtime CPU,
the output's scale, the float16 ulp at that scale, and whether the outputs are bit-identical.
"""
import json, logging, os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

logging.disable(logging.WARNING)


def float_model(K, N, opset, dt, shape, seed):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((K, N)).astype(dt)
    et = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    g = helper.make_graph(
        [helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], "g",
        [helper.make_tensor_value_info("A", et, shape + [K])],
        [helper.make_tensor_value_info("Y", et, shape + [N])],
        [numpy_helper.from_array(W, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def quantized(K, N, opset, dt, shape, bits, bs, sym, acc=None, bias=False, seed=0):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    q = MatMulNBitsQuantizer(float_model(K, N, opset, dt, shape, seed), bits=bits, block_size=bs,
                             is_symmetric=sym, accuracy_level=acc)
    q.process()
    m = q.model.model
    node = [n for n in m.graph.node if n.op_type == "MatMulNBits"]
    assert len(node) == 1, [n.op_type for n in m.graph.node]
    if bias:
        b = np.random.default_rng(seed + 7).standard_normal(N).astype(dt)
        m.graph.initializer.append(numpy_helper.from_array(b, "bias"))
        ins = list(node[0].input) + [""] * (6 - len(node[0].input))
        ins[5] = "bias"
        del node[0].input[:]
        node[0].input.extend(ins)
    return m


def pack_rows(codes, bits):
    """Pack each row of codes on its own, first code in the low bits (MatMulNBits' packing)."""
    per = 8 // bits
    rows, cols = codes.shape
    cols_p = -(-cols // per) * per
    c = np.zeros((rows, cols_p), np.int64)
    c[:, :cols] = codes
    out = np.zeros((rows, cols_p // per), np.int64)
    for j in range(per):
        out |= c[:, j::per] << (bits * j)
    return out.astype(np.uint8)


def hand_made(K, N, opset, dt, shape, bs, zp, g_idx, bias, seed, acc=None):
    """A 4-bit MatMulNBits node from random codes: zp in (None, 'float', 'packed'), g_idx in
    (None, 'identity', 'shuffled')."""
    rng = np.random.default_rng(seed)
    nb = -(-K // bs)
    codes = rng.integers(0, 16, (N, nb * bs))
    codes[:, K:] = 0
    B = pack_rows(codes, 4).reshape(N, nb, bs // 2)
    S = (rng.random((N, nb)) * 0.1 + 0.01).astype(dt)
    et = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(S, "S")]
    ins = ["A", "B", "S", "", "", ""]
    if zp == "float":
        inits.append(numpy_helper.from_array((rng.random((N, nb)) * 15).astype(dt), "Z"))
        ins[3] = "Z"
    elif zp == "packed":
        inits.append(numpy_helper.from_array(pack_rows(rng.integers(0, 16, (N, nb)), 4), "Z"))
        ins[3] = "Z"
    if g_idx is not None:
        g = (np.arange(K) // bs).astype(np.int32)
        if g_idx == "shuffled":
            g = rng.permutation(g).astype(np.int32)
        inits.append(numpy_helper.from_array(g, "G"))
        ins[4] = "G"
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(dt), "bias"))
        ins[5] = "bias"
    while ins[-1] == "":
        ins.pop()
    kw = {} if acc is None else {"accuracy_level": acc}
    node = helper.make_node("MatMulNBits", ins, ["Y"], name="mnb", domain="com.microsoft",
                            K=K, N=N, bits=4, block_size=bs, **kw)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", et, shape + [K])],
                         [helper.make_tensor_value_info("Y", et, shape + [N])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                               helper.make_opsetid("com.microsoft", 1)])


def build(d):
    os.makedirs(d, exist_ok=True)
    cases = {}

    def add(name, m, opset, bits=4, approx=False, g_idx=False):
        onnx.save(m, os.path.join(d, name + ".onnx"))
        packed = opset >= 21 and (bits != 2 or opset >= 25) and not g_idx
        cases[name] = {"form": "packed" if packed else "unpacked", "approximate": approx}

    f32, f16 = np.float32, np.float16
    seed = 0
    for opset in (17, 21):
        for bs in (16, 32, 128):
            for K in (64, 100):
                for sym in (False, True):
                    for dt in (f32, f16):
                        seed += 1
                        shape = [2, 5] if seed % 2 else [1]
                        name = f"q4_b{bs}_k{K}_{'sym' if sym else 'zp'}_{dt.__name__}_o{opset}"
                        add(name, quantized(K, 24, opset, dt, shape, 4, bs, sym, seed=seed), opset)
        for sym in (False, True):
            add(f"q8_b32_k100_{'sym' if sym else 'zp'}_o{opset}",
                quantized(100, 24, opset, f32, [3, 4], 8, 32, sym, seed=40 + opset), opset, 8)
        for dt in (f32, f16):
            add(f"q4_b32_k100_bias_{dt.__name__}_o{opset}",
                quantized(100, 24, opset, dt, [2, 3], 4, 32, False, bias=True, seed=50), opset)
            add(f"q4_b32_k4096_m1_{dt.__name__}_o{opset}",
                quantized(4096, 64, opset, dt, [1, 1], 4, 32, False, bias=True, seed=51), opset)
        # accuracy_level 4: A quantized to int8 per block, as the kernel does.
        add(f"q4_b32_acc4_o{opset}",
            quantized(256, 48, opset, f32, [2, 7], 4, 32, False, acc=4, seed=60), opset)
        add(f"q4_b16_k100_acc4_f16_o{opset}",
            quantized(100, 48, opset, f16, [3, 2], 4, 16, False, acc=4, seed=61), opset)
        add(f"q4_b128_k4096_acc4_m1_o{opset}",
            quantized(4096, 64, opset, f32, [1], 4, 128, True, acc=4, seed=62), opset)
        add(f"q8_b32_k100_acc4_o{opset}",
            quantized(100, 48, opset, f32, [5], 8, 32, False, acc=4, seed=63), opset, 8)
        # ... but not with float zero points or g_idx (the kernel computes in float32 there).
        add(f"hand_floatzp_acc4_o{opset}",
            hand_made(100, 24, opset, f32, [3], 32, "float", None, False, 64, acc=4), opset)
        add(f"hand_gidx_identity_acc4_o{opset}",
            hand_made(100, 24, opset, f32, [3], 32, None, "identity", False, 65, acc=4), opset)
        for dt in (f32, f16):
            add(f"hand_floatzp_{dt.__name__}_o{opset}",
                hand_made(100, 24, opset, dt, [3], 32, "float", None, True, 70), opset)
        add(f"hand_gidx_identity_o{opset}",
            hand_made(100, 24, opset, f32, [3], 32, None, "identity", False, 71), opset)
    for opset in (17, 21, 25):
        for bs in (16, 32):
            for sym in (False, True):
                add(f"q2_b{bs}_k100_{'sym' if sym else 'zp'}_o{opset}",
                    quantized(100, 24, opset, f32, [2, 5], 2, bs, sym, seed=80 + bs), opset, 2)
    add("q2_b32_k100_acc4_o25",
        quantized(100, 24, 25, f32, [2, 5], 2, 32, False, acc=4, seed=66), 25, 2)
    # Below opset 11 there is no Round to mirror the int8 quantization: approximate.
    add("hand_acc4_o10", hand_made(100, 24, 10, f32, [3], 32, None, None, False, 67, acc=4), 10,
        approx=True)
    for zp in (None, "float"):
        for opset in (17, 21):
            add(f"hand_gidx_shuffled_{zp or 'nozp'}_o{opset}",
                hand_made(100, 24, opset, f32, [3], 32, zp, "shuffled", True, 90), opset, g_idx=True)
    # Refused: g_idx with packed zero points (ONNX Runtime ignores them there).
    onnx.save(hand_made(64, 8, 21, f32, [2], 32, "packed", "identity", False, 95),
              os.path.join(d, "refuse_gidx_packed_zp.onnx"))
    # Refused: a B that is a graph input, not a constant.
    m = hand_made(64, 8, 21, f32, [2], 32, None, None, False, 96)
    b = [i for i in m.graph.initializer if i.name == "B"][0]
    m.graph.input.append(helper.make_tensor_value_info("B", TensorProto.UINT8, list(b.dims)))
    m.graph.initializer.remove(b)
    onnx.save(m, os.path.join(d, "refuse_b_input.onnx"))
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def malformed(d):
    """Nodes that disagree with the operator: each must be refused with a reason, never crash."""
    os.makedirs(d, exist_ok=True)
    reasons = {}

    def case(name, reason, m):
        onnx.save(m, os.path.join(d, name + ".onnx"))
        reasons[name] = reason

    def base(opset=21):
        return hand_made(64, 8, opset, np.float32, [2], 32, "packed", None, False, 5)

    def node(m):
        return [n for n in m.graph.node if n.op_type == "MatMulNBits"][0]

    def set_attr(m, name, value):
        n = node(m)
        for a in list(n.attribute):
            if a.name == name:
                n.attribute.remove(a)
        if value is not None:
            n.attribute.append(helper.make_attribute(name, value))
        return m

    def init(m, name):
        return [i for i in m.graph.initializer if i.name == name][0]

    case("bits3", "bits = 3", set_attr(base(), "bits", 3))
    case("block24", "block_size = 24", set_attr(base(), "block_size", 24))
    case("no_k", "'K' attribute", set_attr(base(), "K", None))
    case("n_mismatch", "B has shape", set_attr(base(), "N", 9))
    case("prepacked", "prepacked", set_attr(base(), "weight_prepacked", 1))
    case("unknown_attr", "attribute 'foo'", set_attr(base(), "foo", 1))
    m = base()
    s = init(m, "S")
    s.CopyFrom(numpy_helper.from_array(np.ones((8, 3), np.float32), "S"))
    case("scales_shape", "scales have shape", m)
    m = base()
    z = init(m, "Z")
    z.CopyFrom(numpy_helper.from_array(np.zeros((8, 2), np.uint8), "Z"))
    case("zp_shape", "packed zero points have shape", m)
    m = hand_made(64, 8, 17, np.float32, [2], 32, None, "shuffled", False, 6)
    g = init(m, "G")
    g.CopyFrom(numpy_helper.from_array(np.full(64, 5, np.int32), "G"))
    case("gidx_range", "is not a block", m)
    m = base()
    s = init(m, "S")
    s.CopyFrom(helper.make_tensor("S", TensorProto.BFLOAT16, [8, 2], np.zeros(16, np.uint16).tobytes(), raw=True))
    case("bf16", "bfloat16", m)
    with open(os.path.join(d, "reasons.json"), "w") as f:
        json.dump(reasons, f, indent=1)


def big(d, opset):
    """A 4096 x 4096 int4 weight (block 32, zero points), its B stored as external data."""
    K = N = 4096
    m = hand_made(K, N, opset, np.float32, [1], 32, "packed", None, False, 123)
    onnx.save(m, os.path.join(d, f"big_o{opset}.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location=f"big_o{opset}.onnx.data", size_threshold=1024)


def inputs_for(sess, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        dt = np.float16 if "float16" in i.type else np.float32
        feeds[i.name] = rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(dt)
    return feeds


def compare(pairs_file):
    import onnxruntime as ort
    out = []
    for a, b in json.load(open(pairs_file)):
        sa = ort.InferenceSession(a, providers=["CPUExecutionProvider"])
        sb = ort.InferenceSession(b, providers=["CPUExecutionProvider"])
        feeds = inputs_for(sa, 1234)
        ya, yb = sa.run(None, feeds)[0], sb.run(None, feeds)[0]
        assert ya.shape == yb.shape and ya.dtype == yb.dtype, (a, ya.shape, yb.shape, ya.dtype, yb.dtype)
        ra, rb = ya.astype(np.float64), yb.astype(np.float64)
        scale = float(np.abs(ra).max())
        ulp = float(np.spacing(np.float16(scale))) if ya.dtype == np.float16 else None
        out.append({"err": float(np.abs(ra - rb).max()), "scale": scale, "ulp": ulp,
                    "f16": ya.dtype == np.float16, "exact": bool(np.array_equal(ya, yb))})
    print(json.dumps(out))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "build":
        build(sys.argv[2])
    elif cmd == "malformed":
        malformed(sys.argv[2])
    elif cmd == "big":
        big(sys.argv[2], int(sys.argv[3]))
    elif cmd == "compare":
        compare(sys.argv[2])
    elif cmd == "check":
        for p in sys.argv[2:]:
            onnx.checker.check_model(onnx.load(p), full_check=True)
"##;

fn script(dir: &Path) -> PathBuf {
    let p = dir.join("matmul_nbits_cases.py");
    std::fs::write(&p, SCRIPT).unwrap();
    p
}

fn python(args: &[&str]) -> String {
    let py = common::venv_python().expect("the test venv (scripts/corpus.sh)");
    let o = std::process::Command::new(py)
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "python {:?} failed:\n{}",
        args,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn is_nbits(n: &onnx_safeify::ir::Node) -> bool {
    n.domain() == "com.microsoft" && n.op_type == "MatMulNBits"
}

/// The form the decomposition wrote on its MatMul node (none when nothing was decomposed).
fn forms(doc: &onnx_safeify::Document) -> Vec<String> {
    let g = &doc.model.graph;
    g.order
        .iter()
        .filter_map(|&n| g.node(n).metadata(FORM_KEY).map(str::to_string))
        .collect()
}

fn unfuse(doc: &mut onnx_safeify::Document, with_data: bool) -> UnfuseReport {
    let external = with_data.then_some(&doc.source.external);
    let opts = UnfuseOptions {
        rule: RULE,
        external,
        nchwc_block_size: None,
        unpack: None,
        computed: None,
        profile: None,
    };
    let mut model = std::mem::take(&mut doc.model);
    let report = unfuse::unfuse_all_with(&mut model, &opts, is_nbits);
    doc.model = model;
    report
}

#[derive(Debug)]
struct Diff {
    err: f64,
    scale: f64,
    ulp: Option<f64>,
    f16: bool,
    exact: bool,
}

/// Compare each pair (original, rewritten) on ONNX Runtime CPU, in one Python run.
fn compare(script: &Path, dir: &Path, pairs: &[(PathBuf, PathBuf)]) -> Vec<Diff> {
    let list: Vec<[String; 2]> = pairs
        .iter()
        .map(|(a, b)| [a.display().to_string(), b.display().to_string()])
        .collect();
    let file = dir.join("pairs.json");
    std::fs::write(&file, serde_json::to_string(&list).unwrap()).unwrap();
    let out = python(&[script.to_str().unwrap(), "compare", file.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| Diff {
            err: d["err"].as_f64().unwrap(),
            scale: d["scale"].as_f64().unwrap(),
            ulp: d["ulp"].as_f64(),
            f16: d["f16"].as_bool().unwrap(),
            exact: d["exact"].as_bool().unwrap(),
        })
        .collect()
}

#[test]
fn quantized_models_decompose_within_their_class() {
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy): ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let cases = dir.path().join("cases");
    python(&[script.to_str().unwrap(), "build", cases.to_str().unwrap()]);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cases.join("cases.json")).unwrap()).unwrap();
    let meta = meta.as_object().unwrap();
    assert!(meta.len() >= 80, "only {} cases", meta.len());
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut pairs = Vec::new();
    let mut names = Vec::new();
    for (name, m) in meta {
        let src = cases.join(format!("{name}.onnx"));
        let mut doc = onnx_safeify::load(&src).unwrap();
        let report = unfuse(&mut doc, false);
        assert!(
            report.unsupported.is_empty(),
            "{name}: {:?}",
            report.unsupported
        );
        assert_eq!(report.unfused.len(), 1, "{name}: {report:?}");
        let g = &doc.model.graph;
        assert!(
            g.order.iter().all(|&n| !is_nbits(g.node(n))),
            "{name}: a MatMulNBits is left"
        );
        let form = forms(&doc);
        let want = m["form"].as_str().unwrap();
        assert!(
            form.len() == 1 && form[0].starts_with(want),
            "{name}: form {form:?}, expected {want}"
        );
        // The opset is never raised.
        let opset = doc.model.opset("").unwrap();
        assert!(
            name.ends_with(&format!("_o{opset}")),
            "{name}: opset {opset}"
        );
        let out = out_dir.join(format!("{name}.onnx"));
        onnx_safeify::save(&doc, &out).unwrap();
        pairs.push((src, out));
        names.push((
            name.clone(),
            want.to_string(),
            m["approximate"].as_bool().unwrap(),
        ));
    }
    let mut check: Vec<&str> = vec![script.to_str().unwrap(), "check"];
    check.extend(pairs.iter().map(|(_, o)| o.to_str().unwrap()));
    python(&check);
    let diffs = compare(&script, dir.path(), &pairs);
    let mut table = BTreeMap::new();
    let mut exact = 0;
    for ((name, form, approx), d) in names.iter().zip(&diffs) {
        let class = if *approx {
            Exactness::Approximate(unfuse::matmul_nbits::INT8_ACCURACY_BOUND, 0.0)
        } else {
            Exactness::Rounding
        };
        let allowed = class.allowed_error(d.scale, d.ulp, !d.f16);
        assert!(
            d.err <= allowed,
            "{name} ({form}): error {} over the {class} bound {allowed} (scale {})",
            d.err,
            d.scale
        );
        if *approx {
            // The kernel quantizes A to int8, the decomposition (below opset 11) does not.
            assert!(
                d.err > 1e-5 * d.scale,
                "{name}: approximate but within rounding: {d:?}"
            );
        }
        exact += d.exact as usize;
        let rel = match d.ulp {
            Some(u) if u > 0.0 => format!("{:.2} ulp", d.err / u),
            _ => format!("{:.2e} of scale", d.err / d.scale.max(f64::MIN_POSITIVE)),
        };
        table.insert(
            name.clone(),
            format!(
                "{form:9} {rel}{}",
                if d.exact { " (bit-identical)" } else { "" }
            ),
        );
    }
    eprintln!("{table:#?}\n{exact} of {} bit-identical", diffs.len());
}

#[test]
fn refusals_name_their_reason_and_rx580_pins_the_node() {
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy): ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let cases = dir.path().join("cases");
    python(&[script.to_str().unwrap(), "build", cases.to_str().unwrap()]);
    for (name, why) in [
        ("refuse_b_input", "not a constant"),
        ("refuse_gidx_packed_zp", "ignores such zero points"),
    ] {
        let src = cases.join(format!("{name}.onnx"));
        let mut doc = onnx_safeify::load(&src).unwrap();
        let report = unfuse(&mut doc, true);
        assert!(report.unfused.is_empty(), "{name}: {report:?}");
        assert_eq!(report.unsupported.len(), 1, "{name}: {report:?}");
        let reason = &report.unsupported[0].reason;
        assert!(reason.contains(why), "{name}: {reason}");
        // The rx580 compile: the node falls back to the CPU, with that reason.
        let mut doc = onnx_safeify::load(&src).unwrap();
        let target = onnx_safeify::rules::load_target("rx580").unwrap();
        let r = engine::compile(&mut doc.model, &target, &Options::default());
        let fb: Vec<_> = r.fallbacks.iter().filter(|f| f.node == "mnb").collect();
        assert_eq!(fb.len(), 1, "{name}: {:?}", r.fallbacks);
        assert_eq!(fb[0].to, "cpu", "{name}: {fb:?}");
        assert!(fb[0].reason.contains(why), "{name}: {fb:?}");
        if name == "refuse_b_input" {
            assert_eq!(fb[0].cause, "not-constant", "{name}: {fb:?}");
        }
        assert!(
            r.pinned.iter().any(|p| p == "mnb"),
            "{name}: pinned {:?}",
            r.pinned
        );
        eprintln!("{name}: {} ({})", fb[0].reason, fb[0].cause);
    }
}

fn folder_size(dir: &Path, stem: &str) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(stem))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn a_4096_square_int4_weight_keeps_its_size_packed_and_grows_8x_unpacked() {
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy): ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let models = dir.path().join("models");
    let outs = dir.path().join("outs");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::create_dir_all(&outs).unwrap();
    let mut pairs = Vec::new();
    let mut sizes = Vec::new();
    for opset in [21, 17] {
        python(&[
            script.to_str().unwrap(),
            "big",
            models.to_str().unwrap(),
            &opset.to_string(),
        ]);
        let stem = format!("big_o{opset}");
        let src = models.join(format!("{stem}.onnx"));
        let input = folder_size(&models, &stem);
        let mut doc = onnx_safeify::load(&src).unwrap();
        // Without a data file to read (as in a compile's passes): the packed form needs none.
        let report = unfuse(&mut doc, false);
        if opset >= 21 {
            assert_eq!(report.unfused.len(), 1, "{report:?}");
        } else {
            assert_eq!(report.unsupported.len(), 1, "{report:?}");
            let reason = &report.unsupported[0].reason;
            assert!(reason.contains("external data"), "{reason}");
            let mut doc2 = onnx_safeify::load(&src).unwrap();
            let report = unfuse(&mut doc2, true);
            assert_eq!(report.unfused.len(), 1, "{report:?}");
            doc = doc2;
        }
        let form = forms(&doc);
        let out = outs.join(format!("{stem}.onnx"));
        onnx_safeify::save(&doc, &out).unwrap();
        let output = folder_size(&outs, &stem);
        eprintln!(
            "opset {opset}: input {input} bytes, output {output} bytes ({:.2}x): {}",
            output as f64 / input as f64,
            form[0]
        );
        sizes.push((opset, input, output));
        pairs.push((src, out));
    }
    let (_, in21, out21) = sizes[0];
    let (_, _, out17) = sizes[1];
    // Packed: the codes, scales and zero points as they were (a few hundred bytes of nodes more).
    assert!(
        out21 <= in21 + 64 * 1024,
        "packed output {out21} > input {in21}"
    );
    // Unpacked: 4096 * 4096 float32 weights.
    assert!(out17 >= 4096 * 4096 * 4, "unpacked output {out17}");
    let diffs = compare(&script, dir.path(), &pairs);
    for ((opset, ..), d) in sizes.iter().zip(&diffs) {
        let allowed = Exactness::Rounding.allowed_error(d.scale, d.ulp, true);
        assert!(d.err <= allowed, "opset {opset}: {d:?} over {allowed}");
        eprintln!("opset {opset}: {:.2e} of scale", d.err / d.scale);
    }
}

#[test]
fn malformed_nodes_are_refused_with_a_reason() {
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy): ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let cases = dir.path().join("malformed");
    python(&[
        script.to_str().unwrap(),
        "malformed",
        cases.to_str().unwrap(),
    ]);
    let reasons: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cases.join("reasons.json")).unwrap())
            .unwrap();
    let reasons = reasons.as_object().unwrap();
    assert!(reasons.len() >= 10);
    for (name, why) in reasons {
        let src = cases.join(format!("{name}.onnx"));
        let mut doc = match onnx_safeify::load(&src) {
            Ok(d) => d,
            Err(e) => panic!("{name}: the model does not load: {e}"),
        };
        let report = unfuse(&mut doc, true);
        assert!(report.unfused.is_empty(), "{name}: {report:?}");
        assert_eq!(report.unsupported.len(), 1, "{name}: {report:?}");
        let reason = &report.unsupported[0].reason;
        assert!(
            reason.contains(why.as_str().unwrap()),
            "{name}: '{reason}' does not say {why}"
        );
        eprintln!("{name}: {reason}");
    }
}
