#!/usr/bin/env python3
"""Generates the capability tables of ONNX Runtime's OpenVINO and MIGraphX execution providers.

Neither provider has a kernel registry: each decides per node from a list in its own source.

OpenVINO (`onnxruntime/core/providers/openvino/ov_versions/data_ops.cc`): `supported_op_mode`
(op type, first OpenVINO version, devices), the element types per device
(`populate_types_supported`), the ops allowed a rank-0 tensor (`no_dimension_supported_`), the
ops with a coded condition (`op_list_`, `UnsupportedOpMode`), `ops_supported_only_in_model`
(used by `capability.cc` for graphs of at most three nodes) and `InsertNode` (ops the
partitioner treats as unsupported). Written to `runtimes/capability/openvino.tsv`, one row per
fact with its OpenVINO version and devices, so the CPU and GPU devices are read from one table.

MIGraphX (`onnxruntime/core/providers/migraphx/migraphx_execution_provider.cc`): the op set
`mgx_supported_ops`, the element types of `IsTypeSupported`, and the ops `IsUnsupportedOpMode`
tests. Written to `runtimes/capability/migraphx.tsv`.

Usage: tools/capability/openvino_ep.py --git DIR --commit SHA --repo OWNER/NAME [--branch B]
           [--out runtimes/capability]
DIR is a git directory of ONNX Runtime (a fetched snapshot); the files are read at SHA with
`git show`. Output is deterministic (sorted as the source lists them, facts in source order).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

OV_DIR = "onnxruntime/core/providers/openvino/ov_versions"
MGX_FILE = "onnxruntime/core/providers/migraphx/migraphx_execution_provider.cc"

# ONNX TensorProto element type names as this project's tables spell them.
ONNX_TYPE = {
    "BOOL": "bool", "FLOAT": "float", "FLOAT16": "float16", "BFLOAT16": "bfloat16",
    "DOUBLE": "double", "INT4": "int4", "UINT4": "uint4", "INT8": "int8", "UINT8": "uint8",
    "INT16": "int16", "UINT16": "uint16", "INT32": "int32", "UINT32": "uint32",
    "INT64": "int64", "UINT64": "uint64", "FLOAT8E4M3FN": "float8e4m3fn",
    "FLOAT8E4M3FNUZ": "float8e4m3fnuz", "FLOAT8E5M2": "float8e5m2",
    "FLOAT8E5M2FNUZ": "float8e5m2fnuz", "FLOAT4E2M1": "float4e2m1", "STRING": "string",
}


def strip_comments(text):
    """The source without its comments (`// ...` to the line's end, `/* ... */`): a commented-out
    row of a list is not in the list."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def git_show(git_dir, commit, path):
    out = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"error: cannot read {path} at {commit}: {out.stderr.strip()}")
    return strip_comments(out.stdout) if path.endswith((".cc", ".h")) else out.stdout


def version_text(v):
    m = re.fullmatch(r"V_(\d{4})_(\d+)", v)
    if not m:
        raise SystemExit(f"error: unexpected OpenVINO version token {v}")
    return f"{m.group(1)}.{m.group(2)}"


def block(text, start, end="};"):
    i = text.find(start)
    if i < 0:
        raise SystemExit(f"error: `{start}` not found in the source")
    j = text.find(end, i)
    return text[i:j]


def function_body(text, signature):
    i = text.find(signature)
    if i < 0:
        raise SystemExit(f"error: `{signature}` not found in the source")
    depth, j = 0, text.find("{", i)
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j:k]
    raise SystemExit(f"error: unbalanced braces after `{signature}`")


def devices(text):
    return ",".join(re.findall(r'"(\w+)"', text))


def openvino_rows(data_ops, data_ops_h):
    versions = re.findall(r"\b(V_\d{4}_\d+)\b", block(data_ops_h, "enum versionNum", "}"))
    if not versions:
        raise SystemExit("error: no versionNum enum in data_ops.h")
    rows = []
    ops = block(data_ops, "std::vector<SupportedOp> supported_op_mode")
    for name, ver, devs in re.findall(r'\{"(\w+)",\s*(V_\d+_\d+),\s*\{([^}]*)\}\}', ops):
        rows.append(("op", name, version_text(ver), devices(devs)))
    if len(rows) < 100:
        raise SystemExit(f"error: only {len(rows)} supported_op_mode rows read")
    types = function_body(data_ops, "void DataOps::populate_types_supported()")
    for which, ver, t in re.findall(
            r"supported_types_(\w+?)_\.insert\(\s*std::make_pair\((V_\d+_\d+),\s*"
            r"ONNX_NAMESPACE::TensorProto_DataType::TensorProto_DataType_(\w+)\)", types):
        dev = {"initializer": "initializer", "cpu": "CPU", "gpu": "GPU", "npu": "NPU"}[which]
        rows.append(("type", ONNX_TYPE[t], version_text(ver), dev))
    # type_is_supported accepts int16 and uint16 on every device before its lists.
    mode = function_body(data_ops, "void DataOps::populate_op_mode_supported()")
    for name, ver, devs in re.findall(
            r'no_dimension_supported_\.push_back\(\{"(\w+)",\s*(V_\d+_\d+),\s*\{([^}]*)\}\}\)', mode):
        rows.append(("scalar_ok", name, version_text(ver), devices(devs)))
    # Coded conditions: op_list_.insert({"Op", obj}) after an UnsupportedOpMode with versions.
    for m in re.finditer(r"UnsupportedOpMode obj = \{\{([^}]*)\}(.*?)\n  \}", mode, re.S):
        vers = [version_text(v) for v in re.findall(r"V_\d+_\d+", m.group(1))]
        for name in re.findall(r'op_list_\.insert\(\{"(\w+)"', m.group(2)):
            rows.append(("condition", name, ",".join(vers), "-"))
    only = block(data_ops, "std::set<std::string> ops_supported_only_in_model")
    for name in re.findall(r'"(\w+)"', only):
        rows.append(("only_in_model", name, "-", "-"))
    insert = function_body(data_ops, "bool DataOps::InsertNode(")
    for name in re.findall(r'optype == "(\w+)"', insert):
        rows.append(("split", name, "-", "-"))
    return versions, rows


def migraphx_rows(src):
    rows = []
    ops = block(src, "static std::set<std::string> mgx_supported_ops")
    for name in re.findall(r'"(\w+)"', ops):
        rows.append(("op", name, "-", "GPU"))
    if len(rows) < 100:
        raise SystemExit(f"error: only {len(rows)} mgx_supported_ops read")
    types = function_body(src, "static bool IsTypeSupported(")
    for t in re.findall(r"case ONNX_NAMESPACE::TensorProto_DataType::TensorProto_DataType_(\w+):", types):
        rows.append(("type", ONNX_TYPE[t], "-", "GPU"))
    modes = function_body(src, "static bool IsUnsupportedOpMode(")
    for name in re.findall(r'optype == "(\w+)"', modes):
        rows.append(("condition", name, "-", "-"))
    return rows


def write(path, header, rows):
    lines = [f"# {h}" for h in header]
    lines.append("kind\tname\tsince\tdevices")
    lines += ["\t".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path} ({len(rows)} rows)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git", required=True, help="git directory of onnxruntime")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--repo", required=True, help="owner/name the commit belongs to")
    ap.add_argument("--branch", default="")
    ap.add_argument("--runtime", default="onnxruntime-openvino 1.24.1 (OpenVINO 2025.4.1)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "runtimes/capability"))
    a = ap.parse_args()
    if not re.fullmatch(r"[0-9a-f]{40}", a.commit):
        print("error: --commit takes a full 40-digit commit id", file=sys.stderr)
        return 2
    out = Path(a.out)
    where = f"{a.repo}@{a.commit}" + (f" (branch {a.branch})" if a.branch else "")
    version = git_show(a.git, a.commit, "VERSION_NUMBER").strip()
    data_ops = git_show(a.git, a.commit, f"{OV_DIR}/data_ops.cc")
    data_ops_h = git_show(a.git, a.commit, f"{OV_DIR}/data_ops.h")
    capability = git_show(a.git, a.commit, f"{OV_DIR}/capability.cc")
    versions, rows = openvino_rows(data_ops, data_ops_h)
    # The version GetCapability gives DataOps when the build's OpenVINO is newer than the list.
    fallback = re.findall(r"#else\s+data_ops_ = std::make_unique<DataOps>\(graph_viewer_, (V_\d+_\d+)",
                          capability)
    write(out / "openvino.tsv", [
        "provider: OpenVINOExecutionProvider",
        f"runtime: {a.runtime}; onnxruntime VERSION_NUMBER {version}",
        f"source: {where} {OV_DIR}/data_ops.cc, data_ops.h, capability.cc",
        "generated by tools/capability/openvino_ep.py; do not edit by hand",
        f"note: OpenVINO versions known to the list: {', '.join(version_text(v) for v in versions)}; "
        f"a newer OpenVINO build reads the list as {version_text(fallback[0]) if fallback else 'unknown'} "
        "(capability.cc)",
        "note: op = supported_op_mode (op type, first OpenVINO version, devices; the op's domain is "
        "not checked); type = populate_types_supported (device CPU/GPU/NPU for a node's "
        "inputs and outputs, initializer for constant initializer inputs; int16 and uint16 are "
        "accepted everywhere by type_is_supported); scalar_ok = no_dimension_supported_ (a rank-0 "
        "input or output allowed); condition = op_list_ (a coded UnsupportedOpMode, OpenVINO "
        "versions listed); only_in_model = ops_supported_only_in_model (capability.cc: a graph of "
        "at most 3 nodes starting with one is not claimed); split = DataOps::InsertNode (treated "
        "as unsupported by the partitioner)",
    ], rows)
    mgx = git_show(a.git, a.commit, MGX_FILE)
    write(out / "migraphx.tsv", [
        "provider: MIGraphXExecutionProvider",
        f"runtime: onnxruntime {version} MIGraphX provider",
        f"source: {where} {MGX_FILE}",
        "generated by tools/capability/openvino_ep.py; do not edit by hand",
        "note: op = mgx_supported_ops (op type; domain not checked); type = IsTypeSupported (every "
        "input and output of a claimed node); condition = IsUnsupportedOpMode (coded per-op "
        "modes, most of them whether an input can be evaluated to a constant)",
    ], migraphx_rows(mgx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
