#!/usr/bin/env python3
"""Hold the time model (src/timing.rs) against ONNX Runtime CPU's own profile on this machine.

For each model: ONNX Runtime (CPU provider, one intra-op thread, graph optimisations off so
that every profiled node is a node of the file) runs it `--runs` times with profiling on; each
node's measured time is the median of its `*_kernel_time` events after the first run. The
estimate of every node comes from the Rust model itself (`cargo run --example estimate --
MODEL --device this-cpu --dim ...`: the CPU device model of this machine, one thread), not a
copy of it. For the heavy nodes (kinds gemm, conv, depthwise, conv-transpose) the table
prints estimated and measured milliseconds and their ratio; the figure at the end is the
share of measured heavy-op time whose estimate is within 2x (the issue's goal: 90%).

    ~/.cache/onnx-safeify/venv/bin/python tools/time_model_check.py [--runs 15] [--table]
        [--set tune|held-out|all] [--calibrate]

The models come in two sets (MODELS): those the CPU terms were chosen on ("tune") and those
added afterwards to check them ("held-out"); the figure is printed for each and for both.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ONNX_SAFEIFY_CACHE", Path.home() / ".cache" / "onnx-safeify"))
CORPUS = CACHE / "corpus"

# (path under the corpus, {input: shape} or "npz", set) - the sizes a user runs; --dim gives the
# same sizes to the estimate. "npz": the model's `.inputs.npz` beside it gives the feeds and
# the sizes.
#
# The sets: the time model's CPU terms (src/timing.rs) were set while looking at the "tune"
# models' per-node tables; the "held-out" ones were added afterwards and not looked at while
# choosing a term or a figure, so their share is the honest one. (The audio model of the
# corpus, silero_vad, is left out: its main graph is one If, and bodies are not timed.)
MODELS = [
    ("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 640, 640]}, "tune"),
    ("real/rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx", {"x": [1, 3, 48, 320]}, "tune"),
    ("real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]}, "tune"),
    ("quantized/ch_PP-OCRv4_det_infer.qop.onnx", {"x": [1, 3, 640, 640]}, "tune"),
    ("quantized/ch_PP-OCRv4_rec_infer.qop.onnx", {"x": [1, 3, 48, 320]}, "tune"),
    ("extra/magika__standard_v3_3__model.onnx", {"bytes": [1, 2048]}, "tune"),
    ("transformers/vit_plain.onnx", {"pixel_values": [1, 3, 32, 32]}, "tune"),
    # Held out until its depthwise convolutions at 7x7 missed (0.27 of measured): the
    # per-group term (CPU_GROUP_CLOCKS) was set on it, so it is a tuning model now.
    ("synthetic/syn_mobilenet_dw_300mb.onnx", {"input": [1, 320, 7, 7]}, "tune"),
    # Held out: PP-OCRv4 det at another size, the dynamic-quantized (ConvInteger) and
    # QOperator families not tuned on, the transformers, and two models this script makes
    # (MADE, after the last term was set): a depthwise-separable CNN and an audio front end.
    ("made:dwsep", {"x": [1, 32, 112, 112]}, "held-out"),
    ("made:audio", {"mel": [1, 80, 3000]}, "held-out"),
    ("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 960, 960]}, "held-out"),
    ("quantized/ch_ppocr_mobile_v2.0_cls_infer.qop.onnx", {"x": [1, 3, 48, 192]}, "held-out"),
    ("quantized/ch_PP-OCRv4_det_infer.dyn.onnx", {"x": [1, 3, 640, 640]}, "held-out"),
    ("quantized/ch_PP-OCRv4_rec_infer.dyn.onnx", {"x": [1, 3, 48, 320]}, "held-out"),
    ("quantized/ch_ppocr_mobile_v2.0_cls_infer.dyn.onnx", {"x": [1, 3, 48, 192]}, "held-out"),
    ("transformers/bert_plain.onnx", "npz", "held-out"),
    ("transformers/bert_plain_int8.onnx", "npz", "held-out"),
    ("transformers/gpt2_past.onnx", "npz", "held-out"),
    ("transformers/llama_gqa_decode.onnx", "npz", "held-out"),
    ("transformers/vit_int4.onnx", "npz", "held-out"),
]

CPU_SHARE = False
FASTEST = True

HEAVY_KINDS = {"gemm", "conv", "depthwise", "conv-transpose"}

TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
}


def named_copy(path, folder):
    """The model with every node named (`OP#i` for the unnamed ones), so that the profile's
    node names and the estimate's are the same."""
    m = onnx.load(str(path))
    for i, n in enumerate(m.graph.node):
        if not n.name:
            n.name = f"{n.op_type}#{i}"
    out = Path(folder) / path.name
    onnx.save(m, str(out))
    return out


def estimator():
    """Build the example once (debug profile; the estimate is not what is timed)."""
    subprocess.run(
        ["cargo", "build", "--quiet", "--example", "estimate"], cwd=ROOT, check=True
    )
    return ROOT / "target" / "debug" / "examples" / "estimate"


def estimates(exe, model, shapes):
    args = [str(exe), str(model), "--device", "this-cpu"]
    for name, shape in shapes.items():
        for axis, v in enumerate(shape):
            args += ["--dim", f"{name}[{axis}]={v}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def made_model(name, folder):
    """Models of this script's own making (deterministic weights), written to `folder`:

    - dwsep: a depthwise-separable CNN (MobileNet-like: 3x3 and 5x5 depthwise convolutions
      at stride 1 and 2, 1x1 convolutions, 32 to 512 channels, 112x112 down to 7x7, a 3x3
      convolution, global pooling and a Gemm);
    - audio: a speech encoder's front end (Whisper-like: two 1-D convolutions over 80 mel
      bins x 3000 frames, the second at stride 2, then two MatMuls over the 1500 frames).
    """
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(47)
    nodes, inits = [], []

    def w(name, shape):
        inits.append(nh.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name))
        return name

    def conv(x, cin, cout, k, stride=1, group=1, dims=2):
        i = len(nodes)
        y = f"c{i}"
        shape = [cout, cin // group] + [k] * dims
        nodes.append(
            h.make_node(
                "Conv",
                [x, w(f"w{i}", shape), w(f"b{i}", [cout])],
                [y],
                name=f"conv{i}",
                kernel_shape=[k] * dims,
                strides=[stride] * dims,
                pads=[k // 2] * (2 * dims),
                group=group,
            )
        )
        nodes.append(h.make_node("Relu", [y], [y + "r"], name=f"relu{i}"))
        return y + "r"

    if name == "dwsep":
        x, c = "x", 32
        x = conv(x, 32, 32, 3)
        for cout, k, stride in [
            (64, 3, 1),
            (128, 3, 2),
            (128, 5, 1),
            (256, 3, 2),
            (256, 5, 1),
            (512, 3, 2),
            (512, 5, 1),
            (512, 3, 2),
            (512, 3, 1),
        ]:
            x = conv(x, c, c, k, stride, group=c)
            x = conv(x, c, cout, 1)
            c = cout
        x = conv(x, c, 128, 3)
        nodes.append(h.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
        nodes.append(h.make_node("Flatten", ["gap"], ["flat"], name="flat"))
        nodes.append(h.make_node("Gemm", ["flat", w("fc", [1000, 128])], ["y"], name="fc", transB=1))
        ins = [h.make_tensor_value_info("x", T.FLOAT, [1, 32, 112, 112])]
        outs = [h.make_tensor_value_info("y", T.FLOAT, [1, 1000])]
    elif name == "audio":
        x = conv("mel", 80, 384, 3, dims=1)
        x = conv(x, 384, 384, 3, stride=2, dims=1)
        nodes.append(h.make_node("Transpose", [x], ["t"], name="t", perm=[0, 2, 1]))
        nodes.append(h.make_node("MatMul", ["t", w("m1", [384, 1536])], ["h1"], name="mm1"))
        nodes.append(h.make_node("Relu", ["h1"], ["h1r"], name="mm1_relu"))
        nodes.append(h.make_node("MatMul", ["h1r", w("m2", [1536, 384])], ["y"], name="mm2"))
        ins = [h.make_tensor_value_info("mel", T.FLOAT, [1, 80, 3000])]
        outs = [h.make_tensor_value_info("y", T.FLOAT, [1, 1500, 384])]
    else:
        raise ValueError(name)
    graph = h.make_graph(nodes, name, ins, outs, inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    path = Path(folder) / f"made_{name}.onnx"
    onnx.save(m, str(path))
    return path


def inputs_of(rel, shapes):
    """({input: shape} for the estimate's --dim, the feeds or None)."""
    if shapes != "npz":
        return shapes, None
    z = np.load(CORPUS / rel.replace(".onnx", ".inputs.npz"))
    feeds = {k: z[k] for k in z.files}
    return {k: list(v.shape) for k, v in feeds.items()}, feeds


def measure(model, shapes, runs, given=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = os.path.join(d, "prof")
        sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = dict(given or {})
        for i in sess.get_inputs():
            if i.name in feeds:
                continue
            dt = TYPES.get(i.type, np.float32)
            shape = shapes.get(i.name) or [d if isinstance(d, int) else 1 for d in i.shape]
            if np.issubdtype(dt, np.integer):
                feeds[i.name] = rng.integers(0, 200, size=shape).astype(dt)
            else:
                feeds[i.name] = rng.random(shape, dtype=np.float32).astype(dt)
        sess.run(None, feeds)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(runs):
            sess.run(None, feeds)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        prof = sess.end_profiling()
        events = json.load(open(prof))
    per = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        per.setdefault(e["name"][: -len("_kernel_time")], []).append(e["dur"])
    # The first run warms up; the fastest (or the median) of the rest, in ms. On a shared machine the process
    # does not hold its core all the time, and a kernel's profiled duration is wall time: with
    # --cpu-share, durations are scaled by the share of the runs' wall time the process spent
    # on a CPU (one intra-op thread: at most 1).
    share = min(1.0, cpu / wall) if wall > 0 else 1.0
    scale = share if CPU_SHARE else 1.0
    pick = np.min if FASTEST else np.median
    meas = {k: scale * float(pick(v[1:] if len(v) > 1 else v)) / 1e3 for k, v in per.items()}
    return meas, share


def calibrate(runs=200):
    """The fixed cost of one kernel call as ONNX Runtime's profile reports it: one-element
    Relu, MatMul, Gemm, Conv and QLinearConv, the fastest of `runs` (src/timing.rs's
    CPU_NODE_FLOOR_S, CPU_CONV_SETUP_S and CPU_QCONV_SETUP_S come from this)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    def vi(n, t=T.FLOAT, s=(1, 1)):
        return h.make_tensor_value_info(n, t, list(s))

    def init(name, v, dt):
        return nh.from_array(np.array(v, dtype=dt), name)

    one4 = (1, 1, 1, 1)
    cases = {
        "Relu": ([h.make_node("Relu", ["x"], ["y"], name="n")], [vi("x")], [vi("y")], []),
        "MatMul": (
            [h.make_node("MatMul", ["x", "w"], ["y"], name="n")],
            [vi("x")],
            [vi("y")],
            [init("w", [[1.0]], np.float32)],
        ),
        "Gemm": (
            [h.make_node("Gemm", ["x", "w"], ["y"], name="n")],
            [vi("x")],
            [vi("y")],
            [init("w", [[1.0]], np.float32)],
        ),
        "Conv": (
            [h.make_node("Conv", ["x", "w"], ["y"], name="n")],
            [vi("x", s=one4)],
            [vi("y", s=one4)],
            [init("w", np.ones(one4), np.float32)],
        ),
        "QLinearConv": (
            [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="n")],
            [vi("x", T.UINT8, one4)],
            [vi("y", T.UINT8, one4)],
            [
                init("xs", 0.1, np.float32),
                init("xz", 0, np.uint8),
                init("w", np.ones(one4), np.int8),
                init("ws", 0.1, np.float32),
                init("wz", 0, np.int8),
                init("ys", 0.1, np.float32),
                init("yz", 0, np.uint8),
            ],
        ),
    }
    print(f"one-element kernels, fastest of {runs} profiled runs (us):")
    for name, (nodes, ins, outs, inits) in cases.items():
        m = h.make_model(
            h.make_graph(nodes, name, ins, outs, inits), opset_imports=[h.make_opsetid("", 17)]
        )
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "m.onnx"
            onnx.save(m, str(path))
            meas, _ = measure(path, {}, runs)
        print(f"  {name:<12} {1e3 * meas['n']:.0f}")


def summary(label, rows):
    mt = sum(r[5] for r in rows)
    mi = sum(r[5] for r in rows if r[6])
    print(f"\n{label}: per kind (measured ms, share within 2x, median ratio estimate/measured)")
    for kind in sorted({r[3] for r in rows}):
        rs = [r for r in rows if r[3] == kind]
        kt = sum(r[5] for r in rs)
        ki = sum(r[5] for r in rs if r[6])
        med = float(np.median([r[4] / r[5] for r in rs if r[5] > 0]))
        print(f"  {kind:<14} {kt:9.2f} ms  {100 * ki / kt if kt else 0:5.1f}%  {med:.2f}")
    share = 100.0 * mi / mt if mt else float("nan")
    print(f"{label}: heavy-op time within 2x of the estimate: {share:.1f}% of {mt:.1f} ms (goal: 90%)")
    return share


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--table", action="store_true", help="print every heavy node")
    ap.add_argument(
        "--set",
        choices=["tune", "held-out", "all"],
        default="all",
        help="the models the time model was tuned on, the held-out ones, or both (default)",
    )
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the fixed cost of a kernel call (one-element ops) and stop",
    )
    ap.add_argument(
        "--cpu-share",
        action="store_true",
        help="scale measured durations by the share of wall time the process was on a CPU "
        "(a machine shared with other work)",
    )
    ap.add_argument(
        "--median",
        action="store_true",
        help="each node's median duration over the runs (default: its fastest run, the one "
        "least disturbed by other work on the machine)",
    )
    a = ap.parse_args()
    global CPU_SHARE, FASTEST
    CPU_SHARE = a.cpu_share
    FASTEST = not a.median
    if a.calibrate:
        calibrate()
        return 0
    exe = estimator()
    rows = []
    print(
        f"onnxruntime {ort.__version__}, CPU provider, 1 thread, optimisations off, {a.runs} runs"
        + (", median" if a.median else ", fastest run per node")
        + (", durations scaled by the process's CPU share" if a.cpu_share else "")
        + f"; load average before: {os.getloadavg()[0]:.2f}"
    )
    for rel, shapes, group in MODELS:
        if a.set != "all" and group != a.set:
            continue
        made = rel.startswith("made:")
        path = CORPUS / rel
        if not made and not path.exists():
            print(f"skip {rel}: not in the corpus (scripts/corpus.sh)")
            continue
        dims, feeds = inputs_of(rel, shapes)
        with tempfile.TemporaryDirectory() as d:
            if made:
                path = made_model(rel[len("made:"):], d)
            named = named_copy(path, d)
            est = estimates(exe, named, dims)
            meas, cpu_share = measure(named, dims, a.runs, feeds)
        m_total = m_in = 0.0
        e_sum = 0.0
        label = rel if shapes == "npz" else f"{rel} {list(dims.values())[0]}"
        for n in est:
            if n["kind"] not in HEAVY_KINDS or n["name"] not in meas:
                continue
            m = meas[n["name"]]
            e = n["estimate_ms"]
            ok = 0.5 <= (e / m if m > 0 else float("inf")) <= 2.0
            m_total += m
            e_sum += e
            m_in += m if ok else 0.0
            rows.append((label, n["name"], n["op"], n["kind"], e, m, ok, group))
        share = 100.0 * m_in / m_total if m_total else float("nan")
        print(
            f"[{group}] {label}: heavy ops measured {m_total:.2f} ms, estimated {e_sum:.2f} ms; "
            f"{share:.1f}% of the measured time within 2x (process on a CPU {100 * cpu_share:.0f}% of the time)"
        )
    if a.table:
        print(f"\n{'model':<58} {'node':<40} {'kind':<10} {'est ms':>9} {'meas ms':>9} {'ratio':>6}")
        for label, name, op, kind, e, m, ok, _ in rows:
            r = e / m if m else float("inf")
            print(f"{Path(label).name[:58]:<58} {name[:40]:<40} {kind:<10} {e:9.4f} {m:9.4f} {r:6.2f}{'' if ok else '  *'}")
    for group in ("tune", "held-out"):
        rs = [r for r in rows if r[7] == group]
        if rs:
            summary(group, rs)
    if a.set == "all":
        summary("all", rows)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
