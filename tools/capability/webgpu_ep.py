#!/usr/bin/env python3
"""The kernel table of ONNX Runtime's native WebGPU execution provider, read from ORT's C++ sources.

    webgpu_ep.py --ort-src DIR [--schemas-from-onnxruntime | --schemas FILE.json]
                 [--out runtimes/capability/webgpu.tsv] [--enable-int64] [--commit SHA]
                 [--ort-version V] [--web-version V]
    webgpu_ep.py --dump-schemas FILE.json        (needs the onnxruntime wheel)

DIR holds (parts of) a checkout of microsoft/onnxruntime, at least
onnxruntime/core/providers/webgpu/webgpu_execution_provider.cc; any other file under
onnxruntime/core/providers/webgpu/ and onnxruntime/contrib_ops/webgpu/ is read too. A file
may be an excerpt of the real one (only its kernel registrations); its first line may then be
`// EXCERPT of PATH @ COMMIT ...`, and that commit is put in the output's header.

What is read (stdlib only, a small C-preprocessor subset):
  * the registration table: `BuildKernelCreateInfo<ONNX_OPERATOR_*_CLASS_NAME(kWebGpuExecutionProvider,
    DOMAIN, START[, END][, TYPE], OP)>` and the KERNEL_CREATE_INFO* shorthands (commented-out lines
    are skipped), the `CreateXxx[Versioned]KernelInfo(START[, END], enable_int64)` calls of
    RegisterKernels, `RegisterBinaryElementwiseKernels` / `RegisterRangeKernels` (all kernels of
    that op file), and the contrib table `RegisterWebGpuContribKernels`;
  * each kernel's definition: `ONNX_OPERATOR_[VERSIONED_][TYPED_]KERNEL_EX(...)` (after expanding the
    file's own function-like #defines) and the `KernelDefBuilder()...SetName("Op")` chains of the
    CreateXxxKernelInfo functions (an `if constexpr (StartVersion >= N)` split is honoured), giving
    TypeConstraint(...) and Input/OutputMemoryType(OrtMemTypeCPU*, i);
  * the type helpers of webgpu_supported_types.h (`using X = TypeList<...>` and the functions that
    return BuildKernelDefConstraintsFromTypeList<X>(), and GetOpTypeConstraints(int64, bool)).

A table entry whose exact version range has no definition in the op file read takes the
definition of the same op whose range is nearest (the stored op file can be older or newer than
the EP file); one with no definition at all gets types `*` and no CPU-memory indices. Both are
listed in the header (`# approx:` and `# unresolved:` lines).

Output: one row per registration, tab-separated:
  domain op since until inputs outputs types cpu_inputs cpu_outputs
inputs/outputs are the formal type strings of the ONNX (or ORT contrib) schema in force at `since`.
"""
import argparse
import json
import os
import re
import sys

PROVIDER = "kWebGpuExecutionProvider"
DOMAINS = {
    "kOnnxDomain": "ai.onnx",
    "kMSDomain": "com.microsoft",
    "kMSInternalNHWCDomain": "com.ms.internal.nhwc",
    "kMSDmlDomain": "com.microsoft.dml",
}
CTYPES = {
    "float": "float", "MLFloat16": "float16", "double": "double", "BFloat16": "bfloat16",
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16",
    "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64",
    "bool": "bool", "std::string": "string", "string": "string",
    "Float8E4M3FN": "float8e4m3fn", "Float8E4M3FNUZ": "float8e4m3fnuz",
    "Float8E5M2": "float8e5m2", "Float8E5M2FNUZ": "float8e5m2fnuz",
    "Int4x2": "int4", "UInt4x2": "uint4",
}
EP_FILE = "onnxruntime/core/providers/webgpu/webgpu_execution_provider.cc"
CONTRIB_FILE = "onnxruntime/contrib_ops/webgpu/webgpu_contrib_kernels.cc"
TYPES_FILE = "onnxruntime/core/providers/webgpu/webgpu_supported_types.h"
# RegisterXxxKernels(registry, enable_int64) calls that add only int64 kernels when enable_int64 is set:
# (op, typed element type) of the kernel definitions they register
INT64_ONLY_REGISTER_FNS = {"RegisterClipInt64Kernels": ("Clip", "int64")}
# RegisterXxxKernels(registry, enable_int64) calls: every kernel defined in that op file
REGISTER_FN_FILES = {
    "RegisterBinaryElementwiseKernels": "onnxruntime/core/providers/webgpu/math/binary_elementwise_ops.cc",
    "RegisterRangeKernels": "onnxruntime/core/providers/webgpu/generator/range.cc",
}


# ---------------------------------------------------------------- C text helpers

def strip_comments(text):
    """Remove // and /* */ comments, keeping string and char literals."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def balanced(text, open_at):
    """text[open_at] is '(' or '{'; return the index just past its matching closer."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    i, n = open_at, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return n


def split_args(s):
    """Split a macro/function argument list at top-level commas (parens, braces, <> nest)."""
    args, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c in "\"'":
            j = i + 1
            while j < len(s) and s[j] != c:
                j += 2 if s[j] == "\\" else 1
            cur.append(s[i:j + 1])
            i = j + 1
            continue
        if c in "({[<":
            depth += 1
        elif c in ")}]>":
            depth -= 1
        if c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip() or args:
        args.append("".join(cur).strip())
    return args


def calls(text, name):
    """Yield (start, args_text) of every `name(...)` in text (name as a whole word)."""
    for m in re.finditer(r"\b%s\s*\(" % re.escape(name), text):
        open_at = m.end() - 1
        close = balanced(text, open_at)
        yield m.start(), text[open_at + 1:close - 1]


def expand_macros(text, rounds=4):
    """Expand the function-like #defines of this text (enough for registration macros)."""
    defines = {}
    lines = text.replace("\\\r\n", " ").replace("\\\n", " ").split("\n")
    body_lines = []
    for line in lines:
        m = re.match(r"\s*#\s*define\s+(\w+)\(([^)]*)\)\s*(.*)$", line)
        if m:
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            defines[m.group(1)] = (params, m.group(3))
        elif re.match(r"\s*#", line):
            continue
        else:
            body_lines.append(line)
    text = "\n".join(body_lines)
    for _ in range(rounds):
        changed = False
        for name, (params, body) in defines.items():
            pieces, last = [], 0
            for start, argtext in calls(text, name):
                if start < last:
                    continue
                args = split_args(argtext)
                exp = body
                variadic = params and params[-1] == "..."
                named = params[:-1] if variadic else params
                for k, p in enumerate(named):
                    val = args[k] if k < len(args) else ""
                    exp = re.sub(r"#\s*%s\b" % re.escape(p), '"%s"' % val, exp)
                    exp = re.sub(r"\b%s\b" % re.escape(p), lambda _m, v=val: v, exp)
                if variadic:
                    exp = exp.replace("__VA_ARGS__", ", ".join(args[len(named):]))
                end = balanced(text, text.index("(", start))
                pieces.append(text[last:start])
                pieces.append(" " + exp + " ")
                last = end
                changed = True
            if pieces:
                pieces.append(text[last:])
                text = "".join(pieces)
        if not changed:
            break
    return text


# ---------------------------------------------------------------- type helpers

class Types:
    def __init__(self, header_text, enable_int64):
        self.enable_int64 = enable_int64
        self.lists = {}
        self.helpers = {}
        self.base = None
        t = strip_comments(header_text or "")
        for m in re.finditer(r"using\s+(\w+)\s*=\s*TypeList<([^;]*)>\s*;", t):
            self.lists[m.group(1)] = [CTYPES.get(x.strip(), x.strip()) for x in m.group(2).split(",") if x.strip()]
        for m in re.finditer(r"(\w+)\(\)\s*\{[^}]*?BuildKernelDefConstraintsFromTypeList<(\w+)>", t):
            if m.group(2) in self.lists:
                self.helpers[m.group(1)] = self.lists[m.group(2)]
        m = re.search(r"base_types\s*\{(.*?)\}\s*;", t, re.S)
        if m:
            self.base = [CTYPES.get(x, x) for x in re.findall(r"GetTensorType<([\w:]+)>", m.group(1))]

    def add_local_lists(self, text):
        """`const std::vector<MLDataType>& F() { static std::vector<MLDataType> x{GetTensorType<T>()...}; ...}`"""
        for m in re.finditer(r"(\w+)\(\)\s*\{\s*static\s+(?:const\s+)?std::vector<MLDataType>\s+\w+\s*\{(.*?)\}\s*;", text, re.S):
            found = re.findall(r"GetTensorType<([\w:]+)>", m.group(2))
            if found and m.group(1) not in self.helpers:
                self.helpers[m.group(1)] = [CTYPES.get(x, x) for x in found]

    def resolve(self, expr, local_vars=None, flags=None):
        """Element types of a TypeConstraint expression, or None when not resolvable."""
        e = re.sub(r"\s+", " ", expr.strip())
        local_vars = local_vars or {}
        flags = flags or {}
        if e in local_vars:
            return self.resolve(local_vars[e], None, flags)
        m = re.fullmatch(r"(?:webgpu::)?(\w+)\(\)", e)
        if m and m.group(1) in self.helpers:
            return list(self.helpers[m.group(1)])
        m = re.fullmatch(r"DataTypeImpl::GetTensorType<([\w:]+)>\(\)", e)
        if m:
            return [CTYPES.get(m.group(1), m.group(1))]
        m = re.fullmatch(r"BuildKernelDefConstraintsFromTypeList<\s*TypeList<([^>]*)>\s*>\(\)", e)
        if m:
            return [CTYPES.get(x.strip(), x.strip()) for x in m.group(1).split(",")]
        m = re.fullmatch(r"BuildKernelDefConstraintsFromTypeList<(\w+)>\(\)", e)
        if m and m.group(1) in self.lists:
            return list(self.lists[m.group(1)])
        m = re.fullmatch(r"BuildKernelDefConstraints<([^>]*)>\(\)", e)
        if m:
            return [CTYPES.get(x.strip(), x.strip()) for x in m.group(1).split(",")]
        if e.startswith("{") and e.endswith("}"):  # an initializer list of GetTensorType<T>()
            found = re.findall(r"GetTensorType<([\w:]+)>\(\)", e)
            if found and len(found) == len(split_args(e[1:-1])):
                return [CTYPES.get(x, x) for x in found]
            return None
        m = re.fullmatch(r"(?:webgpu::)?GetOpTypeConstraints\((.*)\)", e)
        if m and self.base is not None:
            args = [a.strip() for a in split_args(m.group(1))] + ["false", "false"]
            truth = []
            for a in args[:2]:
                a = re.sub(r"/\*.*?\*/", "", a).strip()
                truth.append(flags.get(a, a == "true"))
            types = list(self.base)
            if truth[0]:
                types.append("int64")
            if truth[1]:
                types.append("bool")
            return types
        return None


# ---------------------------------------------------------------- kernel definitions

def parse_builder(chain, types, local_vars=None, flags=None):
    """TypeConstraint / memory-type calls of a KernelDefBuilder chain."""
    tcs, unresolved = {}, []
    for _, a in calls(chain, "TypeConstraint"):
        args = split_args(a)
        if len(args) < 2:
            continue
        name = args[0].strip().strip('"')
        got = types.resolve(args[1], local_vars, flags)
        if got is None:
            unresolved.append(name)
            tcs[name] = ["*"]
        else:
            tcs[name] = sorted(set(got))
    cpu_in, cpu_out = set(), set()
    for fn, target in (("InputMemoryType", cpu_in), ("OutputMemoryType", cpu_out)):
        for _, a in calls(chain, fn):
            args = split_args(a)
            if len(args) < 2 or not args[0].startswith("OrtMemTypeCPU"):
                continue
            for idx in re.findall(r"\d+", ",".join(args[1:])):
                target.add(int(idx))
    return {"types": tcs, "cpu_in": cpu_in, "cpu_out": cpu_out, "unresolved": unresolved}


def macro_kernel_defs(text, types, flags, path):
    """Kernel definitions made with ONNX_OPERATOR_*KERNEL_EX in an expanded file."""
    defs = []
    for kind in ("ONNX_OPERATOR_VERSIONED_TYPED_KERNEL_EX", "ONNX_OPERATOR_TYPED_KERNEL_EX",
                 "ONNX_OPERATOR_VERSIONED_KERNEL_EX", "ONNX_OPERATOR_KERNEL_EX"):
        for _, a in calls(text, kind):
            args = split_args(a)
            versioned = "VERSIONED" in kind
            typed = "TYPED" in kind
            need = 5 + versioned + typed
            if len(args) < need:
                continue
            op, dom = args[0], args[1]
            start = args[2]
            end = args[3] if versioned else None
            k = 3 + versioned
            ttype = args[k] if typed else None
            prov = args[k + typed]
            builder = args[k + typed + 1]
            if prov != PROVIDER:
                continue
            d = parse_builder(builder, types, None, flags)
            d.update(op=op, domain=dom, start=int(start), end=int(end) if end else None,
                     typed=CTYPES.get(ttype, ttype) if ttype else None, file=path)
            defs.append(d)
    return defs


def function_kernel_defs(text, types, flags, path):
    """Definitions of `KernelCreateInfo CreateXxx[Versioned]KernelInfo(...)` with KernelDefBuilder chains."""
    out = {}
    for m in re.finditer(r"KernelCreateInfo\s+(Create\w+KernelInfo)\s*\(([^)]*)\)\s*\{", text):
        fname = m.group(1)
        body_end = balanced(text, m.end() - 1)
        body = text[m.end():body_end - 1]
        local_vars = {}
        for v in re.finditer(r"(?:const\s+)?auto\s*&?\s*(\w+)\s*=\s*([^;]+);", body):
            local_vars[v.group(1)] = v.group(2)
        name_m = re.search(r'SetName\(\s*"(\w+)"\s*\)', body)
        dom_m = re.search(r"SetDomain\(\s*(\w+)\s*\)", body)
        if not name_m:
            continue
        branches = []
        cm = re.search(r"if\s+constexpr\s*\(\s*StartVersion\s*>=\s*(\d+)\s*\)\s*\{", body)
        if cm:
            then_end = balanced(body, cm.end() - 1)
            then_part = body[cm.end():then_end - 1]
            else_m = re.match(r"\s*else\s*\{", body[then_end:])
            else_part = ""
            if else_m:
                e_open = then_end + else_m.end() - 1
                else_part = body[e_open + 1:balanced(body, e_open) - 1]
            branches = [(int(cm.group(1)), then_part), (None, else_part)]
        else:
            branches = [(None, body)]
        parsed = []
        for threshold, part in branches:
            d = parse_builder(part, types, local_vars, flags)
            d.update(op=name_m.group(1), domain=dom_m.group(1) if dom_m else "kOnnxDomain", file=path)
            parsed.append((threshold, d))
        out[fname] = parsed
    return out


def register_function_defs(text, types, flags, path):
    """`void RegisterXxxKernels(KernelRegistry&, bool enable_int64) { ... }` whose body calls a helper as
    helper(registry, "Op", create_fn, TYPES, {{begin, end}, {begin, std::nullopt}}[, &T1_TYPES]):
    the helper puts TYPES under "T" (and T1_TYPES under "T1"), as RegisterBinaryOp does."""
    out = {}
    for m in re.finditer(r"void\s+(Register\w+Kernels)\s*\([^)]*\)\s*\{", text):
        body = text[m.end():balanced(text, m.end() - 1) - 1]
        local_vars = {}
        for v in re.finditer(r"(?:const\s+)?auto\s*&?\s*(\w+)\s*=\s*([^;]+);", body):
            local_vars[v.group(1)] = v.group(2)
        for v in re.finditer(r"std::vector<MLDataType>\s+(\w+)\s*\{([^;]*)\}\s*;", body):
            found = re.findall(r"GetTensorType<([\w:]+)>", v.group(2))
            local_vars[v.group(1)] = "BuildKernelDefConstraints<%s>()" % ", ".join(found)
        defs = []
        for cm in re.finditer(r"\b(\w+)\s*\(\s*\w+\s*,\s*\"(\w+)\"", body):
            open_at = body.index("(", cm.start())
            args = split_args(body[open_at + 1:balanced(body, open_at) - 1])
            if len(args) < 5 or not args[4].startswith("{"):
                continue
            tcs = {}
            t = types.resolve(args[3], local_vars, flags)
            tcs["T"] = sorted(set(t)) if t else ["*"]
            if len(args) > 5 and args[5].startswith("&"):
                t1 = types.resolve(args[5][1:], local_vars, flags)
                tcs["T1"] = sorted(set(t1)) if t1 else ["*"]
            for r in re.finditer(r"\{\s*(\d+)\s*,\s*(\d+|std::nullopt)\s*\}", args[4]):
                end = None if r.group(2) == "std::nullopt" else int(r.group(2))
                defs.append({"op": cm.group(2), "domain": "kOnnxDomain", "start": int(r.group(1)), "end": end,
                             "typed": None, "types": tcs, "cpu_in": set(), "cpu_out": set(), "unresolved": [],
                             "file": path})
        if defs:
            out[m.group(1)] = defs
    return out


def pick_function_def(parsed, start):
    for threshold, d in parsed:
        if threshold is None or start >= threshold:
            return d
    return parsed[-1][1]


# ---------------------------------------------------------------- registration table

CLASS_RE = re.compile(
    r"ONNX_OPERATOR_(VERSIONED_)?(TYPED_)?KERNEL_CLASS_NAME\(\s*" + PROVIDER + r"\s*,\s*(\w+)\s*,([^)]*)\)")


def table_entries(text, default_domain):
    """Registrations of an EP/contrib file (comments already stripped). Returns list of dicts."""
    text = "\n".join(l for l in text.replace("\\\n", " ").split("\n") if not l.lstrip().startswith("#"))
    entries = []
    for m in re.finditer(r"BuildKernelCreateInfo\s*<\s*(?:class\s+)?(ONNX_OPERATOR_\w+\([^)]*\))\s*>", text):
        cm = CLASS_RE.match(m.group(1))
        if not cm:
            continue
        versioned, typed, dom = bool(cm.group(1)), bool(cm.group(2)), cm.group(3)
        rest = [x.strip() for x in cm.group(4).split(",")]
        if not rest[0].isdigit():
            continue
        start = int(rest[0])
        end = int(rest[1]) if versioned else None
        ttype = rest[1 + versioned] if typed else None
        op = rest[-1]
        entries.append(dict(domain=dom, op=op, start=start, end=end,
                            typed=CTYPES.get(ttype, ttype) if ttype else None, via="table"))
    for name, versioned, typed in (("KERNEL_CREATE_INFO_VERSIONED", True, False),
                                   ("KERNEL_CREATE_INFO_TYPED", False, True),
                                   ("KERNEL_CREATE_INFO", False, False)):
        for _, a in calls(text, name):
            args = split_args(a)
            if not args or not args[0].isdigit():
                continue  # the #define itself
            start = int(args[0])
            end = int(args[1]) if versioned else None
            ttype = args[1] if typed else None
            entries.append(dict(domain="kOnnxDomain", op=args[-1], start=start, end=end,
                                typed=CTYPES.get(ttype, ttype) if ttype else None, via="table"))
    for m in re.finditer(r"\b(Create(\w+?)(Versioned)?KernelInfo)\s*\(([^)]*)\)", text):
        args = split_args(m.group(4))
        nums = [int(x) for x in args if x.isdigit()]
        fn, op, versioned = m.group(1), m.group(2), bool(m.group(3))
        if versioned and len(nums) >= 2:
            entries.append(dict(domain="kOnnxDomain", op=op, start=nums[0], end=nums[1], typed=None, via=fn))
        elif not versioned and len(nums) >= 1:
            entries.append(dict(domain="kOnnxDomain", op=op, start=nums[0], end=None, typed=None, via=fn))
        elif not nums:
            entries.append(dict(domain=default_domain, op=op, start=1, end=None, typed=None, via=fn))
    for m in re.finditer(r"\b(Register\w+Kernels)\s*\(", text):
        if m.group(1) != "RegisterWebGpuContribKernels":
            entries.append(dict(domain=None, op=None, start=None, end=None, typed=None, via=m.group(1)))
    return entries


# ---------------------------------------------------------------- schemas

def _type_str(formal):
    return getattr(formal, "type_str", None) or getattr(formal, "typeStr")


def load_schemas_from_onnxruntime():
    from onnxruntime.capi import onnxruntime_pybind11_state as C
    out = []
    for s in C.get_all_operator_schema():
        out.append(dict(name=s.name, domain=s.domain or "ai.onnx", since=s.since_version,
                        inputs=[_type_str(i) for i in s.inputs], outputs=[_type_str(o) for o in s.outputs]))
    return out


def formal(type_str):
    """A schema formal: its constraint name (T, T1, ...) or, for a fixed type, the short name (int64)."""
    m = re.fullmatch(r"tensor\((\w+)\)", type_str)
    return m.group(1) if m else type_str


class Schemas:
    def __init__(self, rows):
        self.by = {}
        for r in rows:
            dom = r["domain"] or "ai.onnx"
            self.by.setdefault((dom, r["name"]), []).append(r)
        for v in self.by.values():
            v.sort(key=lambda r: r["since"])

    def at(self, domain, op, version):
        cands = self.by.get((domain, op)) or (self.by.get(("ai.onnx", op)) if domain == "com.ms.internal.nhwc" else None)
        if not cands:
            return None
        best = None
        for r in cands:
            if r["since"] <= version:
                best = r
        return best or cands[0]


# ---------------------------------------------------------------- main

def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def source_commit(text):
    m = re.match(r"//\s*EXCERPT of (\S+) @ (\S+)", text)
    return m.group(2) if m else None


def build(args):
    root = args.ort_src
    flags = {"enable_int64": args.enable_int64, "enable_graph_capture": False}
    types = Types(read(os.path.join(root, TYPES_FILE)) if os.path.exists(os.path.join(root, TYPES_FILE)) else "",
                  args.enable_int64)

    files = []
    for sub in ("onnxruntime/core/providers/webgpu", "onnxruntime/contrib_ops/webgpu"):
        base = os.path.join(root, sub)
        for dirpath, _, names in os.walk(base):
            for n in sorted(names):
                if n.endswith((".cc", ".h")):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root))
    files.sort()

    # other stored versions of the helper header, kept beside it as `webgpu_supported_types.h@COMMIT`:
    # they add helpers the main copy lacks (never override it)
    tdir = os.path.dirname(os.path.join(root, TYPES_FILE))
    if os.path.isdir(tdir):
        for n in sorted(os.listdir(tdir)):
            if n.startswith(os.path.basename(TYPES_FILE) + "@"):
                older = Types(read(os.path.join(tdir, n)), args.enable_int64)
                for k, v in older.helpers.items():
                    types.helpers.setdefault(k, v)
    for rel in files:  # file-local type-list functions, e.g. Cast's CastOpTypeConstraints()
        types.add_local_lists(strip_comments(read(os.path.join(root, rel))))

    macro_defs, func_defs, file_commits, register_fn_defs = [], {}, {}, {}
    manifest = os.path.join(root, "SOURCES.tsv")  # optional: PATH<TAB>COMMIT of whole-file copies
    if os.path.exists(manifest):
        for line in read(manifest).splitlines():
            parts = line.split("\t")
            if len(parts) >= 2 and not line.startswith("#") and parts[0] != EP_FILE:
                file_commits[parts[0]] = parts[1]
    for rel in files:
        raw = read(os.path.join(root, rel))
        c = source_commit(raw)
        if c:
            file_commits[rel] = c
        text = expand_macros(strip_comments(raw))
        if rel in (EP_FILE, CONTRIB_FILE):
            # Memcpy kernels are defined in the EP file itself
            pass
        macro_defs.extend(macro_kernel_defs(text, types, flags, rel))
        func_defs.update(function_kernel_defs(text, types, flags, rel))
        register_fn_defs.update(register_function_defs(text, types, flags, rel))

    entries = []
    for rel, dflt in ((EP_FILE, "kOnnxDomain"), (CONTRIB_FILE, "kMSDomain")):
        p = os.path.join(root, rel)
        if os.path.exists(p):
            entries.extend(table_entries(strip_comments(read(p)), dflt))

    rows, approx, unresolved = [], [], []
    for e in entries:
        if e["op"] is None and e["via"] in INT64_ONLY_REGISTER_FNS:
            # registers only int64 kernels, and only when enable_int64 is set
            if args.enable_int64:
                op, ttype = INT64_ONLY_REGISTER_FNS[e["via"]]
                got = [d for d in macro_defs if d["op"] == op and d["typed"] == ttype]
                if not got:
                    unresolved.append(e["via"] + "()")
                for d in got:
                    rows.append((d, d, ""))
            continue
        if e["op"] is None:  # RegisterXxxKernels: that function's helper calls, else all kernels of its file
            rel = REGISTER_FN_FILES.get(e["via"])
            got = register_fn_defs.get(e["via"]) or ([d for d in macro_defs if d["file"] == rel] if rel else [])
            if not got:
                unresolved.append(e["via"] + "()")
            for d in got:
                rows.append((d, d, ""))
            continue
        d = None
        fn = e["via"]
        if fn.startswith("Create") and fn not in func_defs and fn.replace("VersionedKernelInfo", "KernelInfo") in func_defs:
            fn = fn.replace("VersionedKernelInfo", "KernelInfo")  # one template serves both forms
        if fn.startswith("Create") and fn in func_defs:
            d = dict(pick_function_def(func_defs[fn], e["start"]))
        if d is None:
            same = [x for x in macro_defs if x["op"] == e["op"] and x["domain"] == e["domain"]
                    and x["typed"] == e["typed"]]
            if not same:
                # another typed (or untyped) registration of the same op, e.g. Clip<int32_t> beside
                # Clip<float>, or an untyped table entry whose stored definition is typed (Einsum)
                same = [x for x in macro_defs if x["op"] == e["op"] and x["domain"] == e["domain"]]
            if not same and e["domain"] == "kMSInternalNHWCDomain":
                same = [x for x in macro_defs if x["op"] == e["op"] and x["domain"] == "kOnnxDomain"
                        and x["typed"] == e["typed"]]
            exact = [x for x in same if x["start"] == e["start"] and x["end"] == e["end"]
                     and x["typed"] == e["typed"]]
            if exact:
                d = exact[0]
            elif same:
                def dist(x):
                    lo, hi = x["start"], x["end"] if x["end"] is not None else 10 ** 6
                    inside = lo <= e["start"] <= hi
                    return (0 if inside else 1, abs(x["start"] - e["start"]))
                d = sorted(same, key=dist)[0]
                approx.append("%s@%s from %s@%s%s" % (e["op"], e["start"], d["file"].split("/")[-1], d["start"],
                                                      "-%s" % d["end"] if d["end"] else "+"))
        if d is None:
            unresolved.append("%s-%d" % (e["op"], e["start"]))
            d = {"types": {"T": [e["typed"]]} if e["typed"] else {}, "cpu_in": set(), "cpu_out": set(),
                 "unresolved": []}
        rows.append((e, d, ""))

    out_rows = set()
    for e, d, _ in rows:
        dom = DOMAINS.get(e["domain"], e["domain"])
        tcs = dict(d["types"])
        if e.get("typed") and tcs:
            # a typed registration constrains its first type constraint to that one type
            first = "T" if "T" in tcs else sorted(tcs)[0]
            tcs[first] = [e["typed"]]
        types_s = ";".join("%s=%s" % (k, ",".join(v)) for k, v in sorted(tcs.items())) if tcs else "*"
        cpu_in = ",".join(str(i) for i in sorted(d["cpu_in"])) or "-"
        cpu_out = ",".join(str(i) for i in sorted(d["cpu_out"])) or "-"
        out_rows.add((dom, e["op"], e["start"], "-" if e["end"] is None else str(e["end"]), types_s, cpu_in, cpu_out))
    return sorted(out_rows, key=lambda r: (r[0], r[1], r[2], r[3], r[4])), approx, unresolved, file_commits, types


def apply_type_overrides(rows, text):
    """Adds the element types of a type-override file (domain op since constraint add reason) to the
    constraint of every row of that op whose since is at least `since`. Returns the rows and a
    header note per override applied; an override that matches no row is an error."""
    out = list(rows)
    applied = []
    for line in text.splitlines():
        f = line.split("\t")
        if line.startswith("#") or not line.strip() or f[0] == "domain":
            continue
        if len(f) < 5:
            raise SystemExit("type override needs domain, op, since, constraint, types: %r" % line)
        dom, op, since, name, add = f[0], f[1], int(f[2]), f[3], [t for t in f[4].split(",") if t]
        hit = []
        for i, r in enumerate(out):
            if r[0] != dom or r[1] != op or r[2] < since:
                continue
            tcs = dict(c.split("=", 1) for c in r[4].split(";")) if r[4] != "*" else None
            if tcs is None or name not in tcs:
                continue
            have = tcs[name].split(",")
            tcs[name] = ",".join(sorted(set(have) | set(add)))
            out[i] = r[:4] + (";".join("%s=%s" % (k, v) for k, v in sorted(tcs.items())),) + r[5:]
            hit.append(r[2])
        if not hit:
            raise SystemExit("type override matches no registration: %r" % line)
        applied.append("%s %s+%s at %s (%s)" % (op, name, ",".join(add), ",".join(str(h) for h in sorted(hit)),
                                                 f[5] if len(f) > 5 else ""))
    return out, applied


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ort-src")
    ap.add_argument("--out", default="runtimes/capability/webgpu.tsv")
    ap.add_argument("--schemas", help="JSON list of {name, domain, since, inputs, outputs}")
    ap.add_argument("--schemas-from-onnxruntime", action="store_true")
    ap.add_argument("--dump-schemas")
    ap.add_argument("--enable-int64", action="store_true",
                    help="the provider's enable_int64 option (graph capture implies it); default off")
    ap.add_argument("--commit", default="unknown", help="commit of the EP file read")
    ap.add_argument("--overrides", help="TSV (domain op since cpu_inputs cpu_outputs reason) of CPU-memory "
                    "declarations measured on the runtime where the stored source disagrees; listed in the header")
    ap.add_argument("--type-overrides", help="TSV (domain op since constraint add reason) of element types the "
                    "runtime's kernel accepts beyond the stored source's constraint, measured on the runtime; added "
                    "to every registration of the op from `since` on and listed in the header")
    ap.add_argument("--ort-version", default=None)
    ap.add_argument("--web-version", default="1.30.0")
    args = ap.parse_args()

    if args.dump_schemas:
        with open(args.dump_schemas, "w") as f:
            json.dump(load_schemas_from_onnxruntime(), f, indent=0, sort_keys=True)
        return
    if not args.ort_src:
        ap.error("--ort-src is required")
    if args.schemas:
        schemas = Schemas(json.load(open(args.schemas)))
    elif args.schemas_from_onnxruntime:
        schemas = Schemas(load_schemas_from_onnxruntime())
    else:
        ap.error("give --schemas FILE or --schemas-from-onnxruntime")

    rows, approx, unresolved, file_commits, types = build(args)
    version = args.ort_version
    vf = os.path.join(args.ort_src, "VERSION_NUMBER")
    if version is None:
        version = read(vf).strip() if os.path.exists(vf) else "unknown"
    lines = [
        "# provider: WebGpuExecutionProvider",
        "# runtime: onnxruntime %s (onnxruntime-web %s; its bundle was built from another commit and may differ)"
        % (version, args.web_version),
        "# source: microsoft/onnxruntime@%s %s (+ %s)" % (
            args.commit, EP_FILE,
            ", ".join("%s@%s" % (p.replace("onnxruntime/", "", 1), c[:12] if re.fullmatch(r"[0-9a-f]{40}", c) else c)
                      for p, c in sorted(file_commits.items()))
            or "no other files"),
        "# generated by tools/capability/webgpu_ep.py; do not edit by hand",
        "# mode: enable_int64=%s, enable_graph_capture=false; type helpers: %s" % (
            str(args.enable_int64).lower(),
            " ".join("%s=%s" % (k, ",".join(v)) for k, v in sorted(types.helpers.items()))),
    ]
    if approx:
        lines.append("# approx (attributes taken from another version of the op's definition): " + " ".join(sorted(set(approx))))
    if unresolved:
        lines.append("# unresolved (no definition read; types * and no CPU memory assumed): " + " ".join(sorted(set(unresolved))))
    overrides = {}
    if args.overrides:
        for line in read(args.overrides).splitlines():
            f = line.split("\t")
            if line.startswith("#") or len(f) < 5 or f[0] == "domain":
                continue
            overrides[(f[0], f[1], int(f[2]))] = (f[3], f[4], f[5] if len(f) > 5 else "")
        applied = []
        for i, r in enumerate(rows):
            o = overrides.get((r[0], r[1], r[2]))
            if o:
                rows[i] = r[:5] + (o[0], o[1])
                applied.append("%s-%d cpu_inputs %s->%s cpu_outputs %s->%s (%s)" % (r[1], r[2], r[5], o[0], r[6], o[1], o[2]))
        if applied:
            lines.append("# overridden from %s: %s" % (os.path.basename(args.overrides), "; ".join(applied)))
    if args.type_overrides:
        rows, applied = apply_type_overrides(rows, read(args.type_overrides))
        if applied:
            lines.append("# types added from %s: %s" % (os.path.basename(args.type_overrides), "; ".join(applied)))
    lines.append("domain\top\tsince\tuntil\tinputs\toutputs\ttypes\tcpu_inputs\tcpu_outputs")
    for dom, op, since, until, types_s, cpu_in, cpu_out in rows:
        s = schemas.at(dom, op, since)
        ins = ",".join(formal(t) for t in s["inputs"]) if s and s["inputs"] else "-"
        outs = ",".join(formal(t) for t in s["outputs"]) if s and s["outputs"] else "-"
        lines.append("\t".join([dom, op, str(since), until, ins, outs, types_s, cpu_in, cpu_out]))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: %d rows, %d approximated, %d unresolved" % (args.out, len(rows), len(set(approx)), len(set(unresolved))),
          file=sys.stderr)


if __name__ == "__main__":
    main()
