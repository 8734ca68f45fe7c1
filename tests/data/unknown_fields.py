# Lists every field a model's messages hold that onnx's schema does not define, as protobuf's
# Python runtime sees them: one JSON list of [path, field number, wire type, data] per model.
# Paths name messages by their field and their name (or key, or index), so that a message keeps
# its path when others are added or removed around it.
#   python unknown_fields.py MODEL...
import json
import sys

import onnx
from google.protobuf.unknown_fields import UnknownFieldSet


def ident(m, i):
    for attr in ("name", "key", "domain", "tensor_name"):
        if attr in m.DESCRIPTOR.fields_by_name:
            v = getattr(m, attr)
            if v:
                return v
    return str(i)


def data(v):
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, UnknownFieldSet):
        return [[f.field_number, f.wire_type, data(f.data)] for f in v]
    return v


def walk(msg, path, out):
    for f in UnknownFieldSet(msg):
        out.append([path, f.field_number, f.wire_type, data(f.data)])
    for fd, val in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        items = list(val) if fd.is_repeated else [val]
        for i, m in enumerate(items):
            walk(m, f"{path}/{fd.name}[{ident(m, i)}]", out)


result = []
for p in sys.argv[1:]:
    m = onnx.ModelProto()
    with open(p, "rb") as f:
        m.ParseFromString(f.read())
    out = []
    walk(m, "model", out)
    result.append(sorted(out, key=json.dumps))
print(json.dumps(result))
