#!/usr/bin/env python3
"""Write a larger variant of the corpus's synthetic depthwise model, for memory-scaling benchmarks.

    python tools/bench_big_model.py OUT.onnx [--blocks 3000] [--channels 320]

The same block as ``syn_mobilenet_dw_300mb.onnx`` (the corpus generator's ``mobilenet_dw``:
depthwise 3x3 Conv, BatchNormalization, Clip, pointwise 1x1 Conv, BatchNormalization, Clip, Add;
320 channels, ~431 KB of weights per block), repeated ``--blocks`` times: 3,000 blocks make
21,000 nodes and ~1.3 GB, still one protobuf file (under the 2 GB limit). ``--channels 640
--blocks 750`` makes the other ~1.3 GB variant: the same 5,250 nodes as the corpus model, with
four times its bytes (memory that grows with bytes, not nodes, shows there). Deterministic.
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def init(name, arr):
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def mobilenet_dw(path, C=320, HW=7, blocks=750):
    rng = np.random.default_rng(1)
    nodes, inits = [], []
    x = "input"
    zero, six = "clip_min", "clip_max"
    inits += [init(zero, np.array(0, np.float32)), init(six, np.array(6, np.float32))]
    for b in range(blocks):
        p = f"b{b}"
        inits.append(init(p + "_dw_w", (rng.standard_normal((C, 1, 3, 3)) * 0.3).astype(np.float32)))
        inits.append(init(p + "_dw_b", np.zeros(C, np.float32)))
        inits.append(init(p + "_pw_w", (rng.standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype(np.float32)))
        inits.append(init(p + "_pw_b", np.zeros(C, np.float32)))
        for k in ("bn1", "bn2"):
            inits += [init(f"{p}_{k}_s", np.ones(C, np.float32)), init(f"{p}_{k}_b", np.zeros(C, np.float32)),
                      init(f"{p}_{k}_m", np.zeros(C, np.float32)), init(f"{p}_{k}_v", np.ones(C, np.float32))]
        nodes += [
            helper.make_node("Conv", [x, p + "_dw_w", p + "_dw_b"], [p + "_dw"], group=C, kernel_shape=[3, 3],
                             pads=[1, 1, 1, 1], name=p + "_dw"),
            helper.make_node("BatchNormalization", [p + "_dw"] + [f"{p}_bn1_{s}" for s in "sbmv"], [p + "_bn1"],
                             name=p + "_bn1"),
            helper.make_node("Clip", [p + "_bn1", zero, six], [p + "_a1"], name=p + "_a1"),
            helper.make_node("Conv", [p + "_a1", p + "_pw_w", p + "_pw_b"], [p + "_pw"], kernel_shape=[1, 1],
                             name=p + "_pw"),
            helper.make_node("BatchNormalization", [p + "_pw"] + [f"{p}_bn2_{s}" for s in "sbmv"], [p + "_bn2"],
                             name=p + "_bn2"),
            helper.make_node("Clip", [p + "_bn2", zero, six], [p + "_a2"], name=p + "_a2"),
            helper.make_node("Add", [p + "_a2", x], [p + "_out"], name=p + "_add"),
        ]
        x = p + "_out"
    g = helper.make_graph(nodes, "syn_mobilenet_dw", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", C, HW, HW])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", C, HW, HW])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnx-safeify-corpus")
    m.ir_version = 8
    onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, default=3000)
    ap.add_argument("--channels", type=int, default=320)
    a = ap.parse_args()
    mobilenet_dw(a.out, C=a.channels, blocks=a.blocks)


if __name__ == "__main__":
    main()
