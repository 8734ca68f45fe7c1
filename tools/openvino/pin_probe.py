#!/usr/bin/env python3
"""Does ONNX Runtime's OpenVINO provider honour `layer_ann` pins? (issue 48 item 5)

    pin_probe.py ORIGINAL CPU_SEGMENT.onnx

Run with a Python whose onnxruntime has the OpenVINO provider (onnxruntime-openvino). Pins every
node of ORIGINAL that CPU_SEGMENT (a `cpu` segment of `onnx-safeify ORIGINAL --target
openvino-gpu`) holds, with node metadata layer_ann=safeify_cpu and the session option
session.layer_assignment_settings=cpu(safeify_cpu), and tries a session under the provider
(device CPU) and one silero-vad run. Writes the pinned model to $TMPDIR/pinned.onnx.

Measured on 2026-12-07 with onnxruntime-openvino 1.24.1 and silero_vad_16k_op15 (27 nodes
pinned): the session still fails as the unpinned original does, "CPU plug-in doesn't support
Parameter operation with dynamic rank. Operation name: /model/decoder/If_output_0" -- the pins
do not keep the If's output out of an OpenVINO subgraph, so openvino-gpu writes partitions.
"""
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

if len(sys.argv) != 3:
    sys.exit(__doc__)
orig, cpu_seg = sys.argv[1], sys.argv[2]
OUT = os.path.join(tempfile.gettempdir(), "pinned.onnx")
names = {n.name for n in onnx.load(cpu_seg).graph.node}
m = onnx.load(orig)
k = 0
for n in m.graph.node:
    if n.name in names:
        p = n.metadata_props.add(); p.key = "layer_ann"; p.value = "safeify_cpu"; k += 1
onnx.save(m, OUT)
so = ort.SessionOptions()
so.add_session_config_entry("session.layer_assignment_settings", "cpu(safeify_cpu)")
print(ort.__version__, "pinned", k, "nodes")
try:
    s = ort.InferenceSession(OUT, so, providers=[("OpenVINOExecutionProvider", {"device_type": "CPU"}), "CPUExecutionProvider"])
    feeds = {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    s.run(None, feeds); print("loads and runs")
except Exception as e:
    msg = str(e); i = msg.find("doesn't support"); print("FAIL", msg[i-40:i+120] if i >= 0 else msg[-200:])
