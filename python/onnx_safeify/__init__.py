"""onnx-safeify for build pipelines: rewrite ONNX models so they run safely on GPUs and
drivers with known hazards, check models against a target, and verify rewrites.

The functions below run the same Rust library as the ``onnx-safeify`` command, so a model
compiled here is byte for byte the model the command writes::

    import onnx_safeify

    result = onnx_safeify.compile("model.onnx", "rx580")
    result.save("model.rx580.onnx")          # atomic: a temporary file renamed into place
    print(result.report["summary"])          # the --report JSON, as a dict

    findings = onnx_safeify.check("model.rx580.onnx", "rx580")
    assert findings == []

A model is a path (``str`` or ``os.PathLike``), the file's ``bytes``, or an
``onnx.ModelProto``. Errors raise :class:`Error` (a ``ValueError``) carrying the message the
command prints after ``error: ``: one line, except for rule files, where the first line counts
the errors and the lines after it show each with ``file:line:col`` and a snippet.
"""

import os
import tempfile

from . import _native
from ._native import Error

__all__ = ["Error", "Result", "check", "compile", "targets", "verify", "__version__"]
__version__ = _native.__version__

# Labels of models given in memory, as they appear in messages and reports.
_BYTES_LABEL = "<bytes>"
_PROTO_LABEL = "<ModelProto>"


def _model_args(model):
    """(path, data, label) for the native functions."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        return path, None, path
    if isinstance(model, (bytes, bytearray, memoryview)):
        return None, bytes(model), _BYTES_LABEL
    serialize = getattr(model, "SerializeToString", None)
    if callable(serialize):
        return None, serialize(), _PROTO_LABEL
    raise TypeError(
        "model must be a path, bytes or an onnx.ModelProto, not %s" % type(model).__name__
    )


def _rules_args(rules):
    if isinstance(rules, (str, os.PathLike)):
        rules = (rules,)
    return [os.fspath(r) for r in rules]


def _dims_args(dims):
    if dims is None:
        return []
    out = []
    for name, value in dict(dims).items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise Error("--dim %s=%r: VALUE must be a positive integer" % (name, value))
        out.append((str(name), value))
    return out


class Result:
    """A compiled model: what the command would write, and its report."""

    __slots__ = ("_native", "_bytes", "_report")

    def __init__(self, native):
        self._native = native
        self._bytes = None
        self._report = None

    @property
    def model_bytes(self):
        """The model file's bytes, exactly as ``onnx-safeify MODEL --target T`` writes them.

        Raises :class:`Error` for a model whose weights live in external data files (it is
        more than one file): use :meth:`save` for those."""
        if self._bytes is None:
            self._bytes = self._native.model_bytes()
        return self._bytes

    @property
    def report(self):
        """The compile report, as ``--report FILE.json`` writes it (``outputs`` is empty: the
        model has not been written anywhere yet)."""
        if self._report is None:
            import json

            self._report = json.loads(self._native.report_json)
        return self._report

    @property
    def model(self):
        """The compiled model as an ``onnx.ModelProto`` (needs the ``onnx`` package)."""
        try:
            import onnx
        except ImportError as e:
            raise ImportError("Result.model needs the onnx package: pip install onnx") from e
        return onnx.load_model_from_string(self.model_bytes)

    def save(self, path):
        """Write the model to ``path`` as the command does: into a temporary file in the same
        folder, renamed into place once complete (external data, if any, goes to
        ``path + ".data"``). Returns the list of paths written."""
        return [os.fsdecode(p) for p in self._native.save(os.fspath(path))]

    @property
    def slowdown(self):
        """How many times slower the output is estimated to run than the input on the
        target's device (``report["slowdown"]``; ``report["timing"]`` has the input's and the
        output's GPU, CPU and crossing times and the longest submission against the limit),
        or ``None`` for a target without a device model."""
        return self.report.get("slowdown")

    def __repr__(self):
        r = self.report
        return "<onnx_safeify.Result target=%r applied=%d remaining=%d>" % (
            r["target"],
            len(r["applied"]),
            len(r["remaining"]),
        )


def compile(model, target, *, rules=(), dims=None, allow_unsafe=False, strict=False,
            nchwc_block=None, allow_approximate=False):
    """Rewrite ``model`` for ``target`` (a built-in name, see :func:`targets`, or a rules file
    ``FILE.yaml``), as ``onnx-safeify MODEL --target T`` does.

    ``rules``: extra rules files layered on top (``--rules``). ``dims``: sizes of symbolic
    dimensions, ``{"batch": 1}`` or ``{"x[2]": 48}`` (``--dim``). When some node has no safe
    rewrite the command writes nothing and exits 1; here :class:`Error` is raised with the
    same message, unless ``allow_unsafe`` is true (``--allow-unsafe``). ``strict``: nodes
    that fell back (to the CPU) block the output too (``--strict``); ``report["fallbacks"]``
    lists them either way. ``nchwc_block``: the NCHWc block size of the CPU that saved the
    model (``--nchwc-block``). ``allow_approximate``: let approximate rewrites run
    (``--allow-approximate``); without it a node whose only rewrite is approximate falls back
    (to the CPU, cause ``approximate``). ``report["exactness"]`` is the loosest class of the
    rewrites applied, each of ``report["applied"]`` has its ``exactness`` and ``bound``, and
    ``report["cost"]`` gives heavy ops on the GPU, GPU pieces and CPU<->GPU crossings of the
    input and the output; ``report["timing"]`` their estimated time on the target's device and
    ``report["slowdown"]`` (also ``Result.slowdown``) how much slower the output runs.
    """
    path, data, label = _model_args(model)
    native = _native.compile(
        path, data, label, os.fspath(target), _rules_args(rules), _dims_args(dims),
        bool(allow_unsafe), bool(strict), None if nchwc_block is None else int(nchwc_block),
        bool(allow_approximate),
    )
    return Result(native)


def check(model, target, *, rules=(), dims=None):
    """What the target's rules would change in ``model``, as ``check --format json`` lists
    it: one dict per finding with ``node``, ``op``, ``rule``, ``action``, ``kind``, ``why``,
    ``evidence`` and ``reason``. An empty list means the model is safe for the target."""
    import json

    path, data, label = _model_args(model)
    text = _native.check(path, data, label, os.fspath(target), _rules_args(rules), _dims_args(dims))
    return json.loads(text)["findings"]


def targets():
    """The names of the built-in targets (``onnx-safeify targets``)."""
    return list(_native.targets())


def verify(original, rewritten, *, inputs=None, expected=None, dims=None, rtol=1e-4,
           atol=1e-5, runs=1, seed=0, ort_library=None):
    """Run ``original`` and ``rewritten`` on ONNX Runtime (CPU) with the same inputs and
    compare every output, as ``onnx-safeify verify ... --format json`` does. Returns the
    report as a dict; ``report["passed"]`` says whether every output was within tolerance.

    Models may be paths, bytes, ``onnx.ModelProto`` or :class:`Result`. ONNX Runtime's
    shared library is found as the command finds it (``ort_library``, ``$ORT_DYLIB_PATH``,
    or an installed ``onnxruntime`` package); :class:`Error` is raised when there is none.
    """
    import json

    if ort_library is None and not os.environ.get("ORT_DYLIB_PATH"):
        ort_library = _ort_library_of_this_python()
    with tempfile.TemporaryDirectory(prefix="onnx-safeify-verify-") as tmp:
        args = [_model_path(original, tmp, "original.onnx"),
                _model_path(rewritten, tmp, "rewritten.onnx")]
        for flag, value in (("--inputs", inputs), ("--expected", expected),
                            ("--ort-library", ort_library)):
            if value is not None:
                args += [flag, os.fspath(value)]
        for name, value in _dims_args(dims):
            args += ["--dim", "%s=%d" % (name, value)]
        args += ["--rtol", repr(float(rtol)), "--atol", repr(float(atol)),
                 "--runs", str(int(runs)), "--seed", str(int(seed))]
        return json.loads(_native.verify(args))


def _ort_library_of_this_python():
    """The shared library of the onnxruntime package this interpreter imports, if any."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for pattern in ("libonnxruntime.so*", "libonnxruntime*.dylib", "onnxruntime.dll"):
            found = sorted(glob.glob(os.path.join(folder, "capi", pattern)))
            if found:
                return found[-1]
    return None


def _model_path(model, tmp, name):
    if isinstance(model, Result):
        path = os.path.join(tmp, name)
        model.save(path)
        return path
    path, data, _ = _model_args(model)
    if path is not None:
        return path
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path
