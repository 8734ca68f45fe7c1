#!/usr/bin/env python3
"""Which operators OpenVINO's ONNX front end cannot load, found by loading real models.

    openvino_capability.py MODEL_OR_DIR... [--json OUT]

Each model is read (`Core.read_model`) and compiled for the CPU plugin; the operators OpenVINO
names in its error summary ("No conversion rule found for operations: ...": it has no such
operator; "Conversion is failed for: ...": the operator failed, possibly because an operator
before it left an input's type unknown) are collected with the model that showed them. Also prints the com.microsoft operators of
the models that loaded, which OpenVINO does accept. The figures back the `openvino-gpu`
target's must-rewrite rule (rules/openvino-gpu.yaml) and docs/hazards.md.
"""
import glob
import json
import os
import re
import sys

import onnx
import openvino as ov


def models(args):
    for a in args:
        if os.path.isdir(a):
            yield from sorted(glob.glob(os.path.join(a, "*.onnx")))
        else:
            yield a


def main(argv):
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    core = ov.Core()
    refused, accepted = {}, {}
    for f in models(argv[1:]):
        m = onnx.load(f, load_external_data=False)
        ops = {f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in m.graph.node}
        try:
            core.compile_model(core.read_model(f), "CPU")
        except Exception as e:  # noqa: BLE001 (OpenVINO raises its own types)
            names = set()
            for line in str(e).splitlines():
                line = line.strip()
                for head, kind in (("-- No conversion rule found for operations:", "no rule"),
                                   ("-- Conversion is failed for:", "failed")):
                    if line.startswith(head):
                        names.update((kind, x.strip()) for x in line[len(head):].split(",") if x.strip())
            for kind, n in sorted(names):
                refused.setdefault(kind, {}).setdefault(n, []).append(os.path.basename(f))
            if not names:
                refused.setdefault("other", {}).setdefault(" ".join(str(e).split())[:120], []).append(
                    os.path.basename(f))
            continue
        for op in ops:
            if op.startswith("com.microsoft::"):
                accepted.setdefault(op, []).append(os.path.basename(f))
    print(f"OpenVINO {ov.__version__}")
    for kind, why in (("no rule", "no conversion rule (the front end has no such operator)"),
                      ("failed", "conversion failed (the operator, or an input type an operator "
                                 "before it left unknown)"),
                      ("other", "other errors")):
        print(f"refused, {why}:")
        for op in sorted(refused.get(kind, {})):
            seen = refused[kind][op]
            print(f"  {op}: {len(seen)} model(s), e.g. {seen[0]}")
    print("com.microsoft ops accepted (in models that loaded):")
    for op in sorted(accepted):
        print(f"  {op}: {len(accepted[op])} model(s)")
    if out_json:
        with open(out_json, "w") as fh:
            json.dump({"openvino": ov.__version__, "refused": refused, "accepted": accepted}, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv)
