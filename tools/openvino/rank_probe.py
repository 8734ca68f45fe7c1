#!/usr/bin/env python3
"""What makes silero-vad load on OpenVINO (issue 48 item 5, not done): the evidence so far.

    rank_probe.py [MODEL]    (default: the corpus's silero_vad_16k_op15.onnx)

OpenVINO 2026.4.1's ONNX front end refuses silero-vad: "Conv ... input data tensor's rank has to
be known (static)" and "ReduceMean ... Unsupported input type dynamic". The Conv reads
Relu(Cast(Unsqueeze(If_1 output))), an If whose branches nest Ifs that squeeze a dim in one
branch and pass it through in the other, so OpenVINO merges rank 2 and rank 3 into a dynamic
rank; the ReduceMean's failure follows from the Conv's. This script tries, on the model:

1. value_info declaring the Conv's input rank, in the main graph (and, for the models whose
   decoder sits inside an If on the sample rate, in that branch);
2. the If branches' outputs declared with the rank the taken branch gives;
3. a Reshape(x, [0, 0, -1]) before the Conv (an identity wherever the original runs: Conv needs
   rank 3 there), then compiling on OpenVINO CPU with and without static input shapes.

Measured on 2026-12-07 (OpenVINO 2026.4.1, ONNX Runtime 1.32): 1 and 2 change nothing
(OpenVINO derives every type from the ops and ignores declared ones); 3 loads, but CPU's compile
then refuses "/model/decoder/If" ("doesn't support If operation with dynamic rank": that If
squeezes the time axis when it is 1, which depends on the input length); with the inputs reshaped
to [1, 512] / [2, 1, 128] / [] before compiling (what ONNX Runtime's OpenVINO provider does on a
GPU, one compile per input shape) it runs, 9.7e-6 from ONNX Runtime CPU at most on this
script's inputs. silero_vad.onnx (the whole model inside an If on the sample rate): 1 and 2
change nothing, 3 loads, and its compile refuses If_0 (dynamic rank) with dynamic inputs and
fails in a Transpose's shape inference ("Input order must have shape [n]") with static ones:
not yet understood.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
from onnx import TensorProto as T
from onnx import helper as h

CACHE = os.environ.get("ONNX_SAFEIFY_CACHE", os.path.expanduser("~/.cache/onnx-safeify"))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    CACHE, "corpus/extra/silero_vad__silero_vad_16k_op15.onnx")
core = ov.Core()


def first_failure(e):
    s = str(e)
    i = s.find("-- ")
    return (s[i:i + 160] if i >= 0 else s[-200:]).replace("\n", " | ")


def loads(m, label):
    try:
        core.read_model(m.SerializeToString(), b"")
        print(f"{label}: loads")
        return True
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        print(f"{label}: refused: {first_failure(e)}")
        return False


def convs(g):
    """(graph, node) for every Conv reading a Relu, at any depth."""
    for n in g.node:
        if n.op_type == "Conv" and "decoder/2" in n.name:
            yield g, n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from convs(a.g)


def with_value_info():
    m = onnx.load(MODEL)
    for g, n in convs(m.graph):
        g.value_info.append(h.make_tensor_value_info(n.input[0], T.FLOAT, ["a", "b", "c"]))
    return m


def with_branch_ranks():
    m = onnx.load(MODEL)

    def walk(g):
        for n in g.node:
            if n.op_type == "If":
                for a in n.attribute:
                    for o in a.g.output:
                        tt = o.type.tensor_type
                        if not tt.HasField("shape"):
                            tt.elem_type = T.FLOAT
                            for _ in range(2):
                                tt.shape.dim.add()
                    walk(a.g)
    walk(m.graph)
    return m


def with_reshape():
    m = onnx.load(MODEL)
    for i, (g, n) in enumerate(list(convs(m.graph))):
        shape = f"rank3_{i}"
        g.initializer.append(h.make_tensor(shape, T.INT64, [3], [0, 0, -1]))
        at = list(g.node).index(n)
        g.node.insert(at, h.make_node("Reshape", [n.input[0], shape], [shape + "_x"],
                                      name=shape + "_reshape"))
        n.input[0] = shape + "_x"
    return m


def run(m, static):
    feeds = {"input": np.random.default_rng(0).random((1, 512), np.float32),
             "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    om = core.read_model(m.SerializeToString(), b"")
    if static:
        om.reshape({k: list(v.shape) for k, v in feeds.items()})
    try:
        c = core.compile_model(om, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    except Exception as e:  # noqa: BLE001
        print(f"  compile ({'static' if static else 'dynamic'} inputs): refused: "
              f"{str(e).strip().splitlines()[-1][:160]}")
        return
    got = c(feeds)
    ref = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = max(float(np.abs(got[o] - r).max()) for o, r in zip(c.outputs, ref))
    print(f"  compile ({'static' if static else 'dynamic'} inputs): runs, "
          f"max |OpenVINO - ONNX Runtime| {worst:.3g}")


if __name__ == "__main__":
    loads(onnx.load(MODEL), "original")
    loads(with_value_info(), "1. value_info for the Conv's input")
    loads(with_branch_ranks(), "2. If branch outputs declared rank 2")
    m = with_reshape()
    if loads(m, "3. Reshape [0, 0, -1] before the Conv"):
        for static in (False, True):
            run(m, static)
