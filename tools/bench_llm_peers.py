#!/usr/bin/env python3
"""Peers for the LLM rows of scripts/bench.sh: a load + save of a model with external data.

    bench_llm_peers.py onnx MODEL OUT   Python onnx: onnx.load (weights read into memory) and
                                        onnx.save with every tensor in OUT.data
    bench_llm_peers.py ort MODEL OUT    onnxruntime.transformers' OnnxModel (the optimizer's
                                        model class): load, then save_model_to_file with
                                        external data
"""
import os
import sys

import onnx


def main(tool, model, out):
    if tool == "onnx":
        m = onnx.load(model)
        onnx.save(m, out, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=os.path.basename(out) + ".data")
    elif tool == "ort":
        from onnxruntime.transformers.onnx_model import OnnxModel

        m = OnnxModel(onnx.load(model))
        m.save_model_to_file(out, use_external_data_format=True, all_tensors_to_one_file=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
