#!/usr/bin/env python3
"""Compile models for targets and tabulate what safety costs and whether the output is faithful.

    transformer_table.py BIN OUT_DIR MODEL... [--targets rx580,webgpu,...] [--json FILE]
                         [--allow-approximate]

For each model and target: `BIN MODEL --target T -o OUT --report R`, then `BIN check OUT
--target T` and `BIN verify MODEL OUT` (with MODEL's `.inputs.npz` beside it when there is one).
Prints one row per compile: exit codes, heavy ops on the GPU (of all heavy ops, in every
graph), GPU pieces and the CPU barriers inserted (from the report), and the verify verdict.
Heavy ops are counted from the written model itself: a node is on the CPU when its
`layer_ann` metadata is set (the targets' annotation).
"""
import json
import os
import subprocess
import sys

import onnx

HEAVY = {
    "Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QLinearConv",
    "QLinearMatMul", "LSTM", "GRU", "RNN", "Einsum", "Attention", "MultiHeadAttention",
    "GroupQueryAttention", "DecoderMaskedMultiHeadAttention", "PackedAttention",
    "PackedMultiHeadAttention", "QAttention", "MatMulNBits", "FusedConv", "FusedGemm",
    "FusedMatMul", "QGemm", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    "DynamicQuantizeLSTM", "NhwcConv", "TransposeMatMul", "GemmFastGelu",
}


def graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graphs(a.g)
            for sub in a.graphs:
                yield from graphs(sub)


def heavy_counts(path):
    m = onnx.load(path, load_external_data=False)
    gpu = cpu = barriers = 0
    for g in graphs(m.graph):
        for n in g.node:
            pinned = any(p.key == "layer_ann" for p in n.metadata_props)
            if n.name.endswith("/barrier") or "/barrier_" in n.name:
                barriers += 1
            if n.op_type in HEAVY:
                if pinned:
                    cpu += 1
                else:
                    gpu += 1
    return gpu, cpu, barriers


def silero_inputs(model, out_dir):
    """silero-vad takes 512 samples at 16 kHz (random audio would give other sizes)."""
    import numpy as np

    names = [i.name for i in onnx.load(model, load_external_data=False).graph.input]
    rng = np.random.default_rng(3)
    feed = {"input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
            "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32)}
    if "sr" in names:
        feed["sr"] = np.array(16000, np.int64)
    path = os.path.join(out_dir, os.path.basename(model)[:-5] + ".inputs.npz")
    np.savez(path, **feed)
    return path


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main(argv):
    targets = ["rx580", "webgpu", "directml", "rocm-migraphx", "coreml", "openvino-gpu", "tensorrt",
               "intel-gen9", "intel-xe", "rdna2", "none"]
    out_json = None
    extra = []
    args = []
    it = iter(argv[1:])
    for a in it:
        if a == "--targets":
            targets = next(it).split(",")
        elif a == "--json":
            out_json = next(it)
        elif a == "--allow-approximate":
            extra.append(a)
        else:
            args.append(a)
    if len(args) < 3:
        sys.exit(__doc__)
    binary, out_dir, models = args[0], args[1], args[2:]
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    print(f"{'model':34} {'target':13} {'exit':>4} {'check':>5} {'heavy GPU':>10} {'pieces':>6} "
          f"{'barriers':>8}  verify")
    for model in models:
        stem = os.path.basename(model)[:-5]
        inputs = model[:-5] + ".inputs.npz"
        if stem.startswith("silero_vad"):
            inputs = silero_inputs(model, out_dir)
        before = heavy_counts(model)
        for t in targets:
            out = os.path.join(out_dir, f"{stem}.{t}.onnx")
            rep = os.path.join(out_dir, f"{stem}.{t}.json")
            for f in (out, rep):
                if os.path.exists(f):
                    os.remove(f)
            rc, text = run([binary, model, "--target", t, "-o", out, "--report", rep] + extra)
            row = {"model": stem, "target": t, "exit": rc, "heavy_in": before[0] + before[1]}
            if rc == 0 and os.path.exists(out):
                crc, _ = run([binary, "check", out, "--target", t] + extra)
                gpu, cpu, barriers = heavy_counts(out)
                pieces = None
                exactness = crossing = None
                try:
                    r = json.load(open(rep))
                    pieces = len(r.get("pieces", [])) or None
                    exactness = r.get("exactness")
                    cost = (r.get("cost") or {}).get("output") or {}
                    if cost:
                        pieces = cost.get("gpu_pieces", pieces)
                        crossing = (cost.get("crossings"), cost.get("crossing_bytes"),
                                    cost.get("crossings_unknown_size"))
                except (OSError, ValueError):
                    pass
                vcmd = [binary, "verify", model, out, "--format", "json"]
                if os.path.exists(inputs):
                    vcmd += ["--inputs", inputs]
                vrc, vtext = run(vcmd)
                verdict = "pass" if vrc == 0 else f"FAIL({vrc})"
                worst = None
                try:
                    v = json.loads(vtext[vtext.index("{"):])
                    worst = v.get("worst") or v.get("max_error")
                except ValueError:
                    pass
                row.update(check=crc, heavy_gpu=gpu, heavy_cpu=cpu, pieces=pieces, barriers=barriers,
                           verify=verdict, verify_rc=vrc, exactness=exactness, crossing=crossing)
                if vrc != 0:
                    row["verify_tail"] = vtext.strip().splitlines()[-3:]
            else:
                row["error"] = text.strip().splitlines()[-1:] if text.strip() else []
            rows.append(row)
            heavy = (f"{row.get('heavy_gpu', '-')}/{row.get('heavy_gpu', 0) + row.get('heavy_cpu', 0)}"
                     if "heavy_gpu" in row else "-")
            print(f"{stem:34} {t:13} {rc:>4} {row.get('check', '-'):>5} {heavy:>10} "
                  f"{str(row.get('pieces') or '-'):>6} {row.get('barriers', '-'):>8}  "
                  f"{row.get('verify', ' '.join(row.get('error', [])))}", flush=True)
    gpu = sum(r.get("heavy_gpu", 0) for r in rows if r["target"] == "rx580")
    allh = sum(r.get("heavy_gpu", 0) + r.get("heavy_cpu", 0) for r in rows if r["target"] == "rx580")
    bad = [r for r in rows if r["exit"] != 0 or r.get("check", 0) != 0 or r.get("verify_rc", 0) != 0]
    print(f"rx580 heavy ops on the GPU: {gpu}/{allh} ({100.0 * gpu / max(allh, 1):.1f}%); "
          f"{len(rows)} compiles, {len(bad)} not (exit 0, check clean, verify pass)")
    classes = {}
    for r in rows:
        if r["exit"] == 0:
            k = (r.get("exactness") or "?").split(":")[0]
            classes.setdefault(r["target"], {}).setdefault(k, 0)
            classes[r["target"]][k] += 1
        else:
            classes.setdefault(r["target"], {}).setdefault(f"exit {r['exit']}", 0)
            classes[r["target"]][f"exit {r['exit']}"] += 1
    for t in targets:
        print(f"classes {t}: " + ", ".join(f"{k} {v}" for k, v in sorted(classes.get(t, {}).items())))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv)
