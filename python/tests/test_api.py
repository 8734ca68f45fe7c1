"""The Python module against the command it wraps: same bytes, same report, same messages.

Run against an installed wheel (``.ci/run`` builds one from source into a fresh venv):
    python -m pytest python/tests
``ONNX_SAFEIFY_SAMPLE`` names the sample model (default: ``samples/ocr_tiny.onnx`` of this
checkout).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

import onnx_safeify

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.environ.get(
    "ONNX_SAFEIFY_SAMPLE", os.path.join(HERE, "..", "..", "samples", "ocr_tiny.onnx")
)


def command():
    """The installed console script, beside this interpreter."""
    exe = os.path.join(os.path.dirname(sys.executable), "onnx-safeify")
    assert os.path.exists(exe), "the wheel installs an onnx-safeify command next to python"
    return exe


def run(*args, cwd=None):
    p = subprocess.run([command(), *args], capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def sample(tmp_path):
    """A private copy of the sample (outputs are written beside it)."""
    p = tmp_path / "ocr_tiny.onnx"
    shutil.copy(SAMPLE, p)
    return p


def deny_conv(tmp_path):
    p = tmp_path / "deny.yaml"
    p.write_text(
        "rules:\n"
        "  - id: no-conv\n"
        "    why: test - no convolution may run on this GPU\n"
        "    evidence: []\n"
        "    match: {op: Conv}\n"
        "    action: deny\n"
    )
    return p


def last_error_line(stderr):
    lines = [l for l in stderr.splitlines() if l.startswith("error: ")]
    assert lines, stderr
    return lines[-1][len("error: "):]


def test_targets_match_the_command():
    names = onnx_safeify.targets()
    assert {"none", "directml", "rx580"} <= set(names)
    code, out, _ = run("targets")
    assert code == 0
    assert [l.split()[0] for l in out.splitlines()] == names


def test_compile_gives_the_bytes_and_report_the_command_writes(sample, tmp_path):
    result = onnx_safeify.compile(str(sample), "rx580")
    out, report = tmp_path / "cli.onnx", tmp_path / "cli.json"
    code, _, err = run(str(sample), "--target", "rx580", "-o", str(out), "--report", str(report))
    assert code == 0, err
    assert result.model_bytes == out.read_bytes()
    want = json.loads(report.read_text())
    assert want["outputs"] == [str(out)]
    want["outputs"] = []
    assert result.report == want
    assert result.report["target"] == "rx580"
    assert any(a["rule"] == "split-depthwise" for a in result.report["applied"])


def test_models_in_memory_compile_like_files(sample):
    from_file = onnx_safeify.compile(sample, "rx580").model_bytes
    data = sample.read_bytes()
    assert onnx_safeify.compile(data, "rx580").model_bytes == from_file
    assert onnx_safeify.compile(bytearray(data), "rx580").model_bytes == from_file

    class Proto:  # anything with SerializeToString, like onnx.ModelProto
        def SerializeToString(self):
            return data

    assert onnx_safeify.compile(Proto(), "rx580").model_bytes == from_file
    assert onnx_safeify.compile(data, "rx580").report["input"] == "<bytes>"


def test_target_none_is_byte_identical(sample):
    assert onnx_safeify.compile(sample, "none").model_bytes == sample.read_bytes()


def add_unknown_field(msg, number):
    """Give a protobuf message a varint field its schema does not define (protobuf keeps it)."""
    key, out = (number << 3) | 0, bytearray()
    for v in (key, 7):
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    msg.ParseFromString(msg.SerializeToString() + bytes(out))


def test_fields_the_schema_does_not_define_are_kept_or_refused(sample, tmp_path):
    onnx = pytest.importorskip("onnx")
    from google.protobuf.unknown_fields import UnknownFieldSet

    m = onnx.load(str(sample))
    add_unknown_field(m, 5000)
    last = m.graph.node[-1]  # the head's Sigmoid: rx580 leaves it alone
    add_unknown_field(last, 5001)
    data = m.SerializeToString()
    # Untouched: byte for byte.
    assert onnx_safeify.compile(data, "none").model_bytes == data
    # Rewritten: kept on the model and on the node left in place.
    out = onnx.ModelProto()
    out.ParseFromString(onnx_safeify.compile(data, "rx580").model_bytes)
    assert [f.field_number for f in UnknownFieldSet(out)] == [5000]
    kept = [n for n in out.graph.node if n.name == last.name]
    assert [f.field_number for f in UnknownFieldSet(kept[0])] == [5001]

    # On a node the rewrite replaces (a depthwise Conv it splits): refused, like the command.
    dw = next(n for n in m.graph.node if n.name == "backbone.block3.dw.conv")
    add_unknown_field(dw, 5002)
    path = tmp_path / "unknown.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(onnx_safeify.Error) as e:
        onnx_safeify.compile(path, "rx580")
    assert "node 'backbone.block3.dw.conv' (Conv) field 5002 (varint)" in str(e.value)
    code, _, err = run(str(path), "--target", "rx580")
    assert code == 2
    assert str(e.value) == last_error_line(err)
    assert not (tmp_path / "unknown.rx580.onnx").exists()


def test_save_is_atomic_and_returns_what_it_wrote(sample, tmp_path):
    result = onnx_safeify.compile(sample, "rx580")
    dest = tmp_path / "out" / "model.onnx"
    dest.parent.mkdir()
    assert result.save(dest) == [str(dest)]
    assert dest.read_bytes() == result.model_bytes
    assert os.listdir(dest.parent) == ["model.onnx"], "no temporary file is left behind"
    with pytest.raises(onnx_safeify.Error, match="refusing to overwrite the input"):
        result.save(sample)


def test_model_property_is_a_modelproto(sample):
    onnx = pytest.importorskip("onnx")
    m = onnx_safeify.compile(sample, "rx580").model
    assert isinstance(m, onnx.ModelProto)
    onnx.checker.check_model(m, full_check=True)
    keys = {p.key for p in m.metadata_props}
    assert "onnx_safeify.runtime.session.layer_assignment_settings" in keys
    # An onnx.ModelProto is accepted as input too.
    again = onnx_safeify.compile(onnx.load(str(sample)), "rx580")
    assert again.model_bytes == onnx_safeify.compile(sample, "rx580").model_bytes


def test_check_lists_findings_then_nothing(sample):
    findings = onnx_safeify.check(sample, "rx580")
    assert findings, "the sample has wide depthwise convolutions"
    for f in findings:
        assert {"node", "op", "rule", "why", "evidence"} <= set(f)
    assert any(f["rule"] == "split-depthwise" and f["op"] == "Conv" for f in findings)
    code, out, _ = run("check", str(sample), "--target", "rx580", "--format", "json")
    assert code == 1
    assert json.loads(out)["findings"] == findings
    compiled = onnx_safeify.compile(sample, "rx580")
    assert onnx_safeify.check(compiled.model_bytes, "rx580") == []


def test_dims_reach_the_engine(sample):
    assert onnx_safeify.compile(sample, "rx580", dims={"batch": 1}).model_bytes
    with pytest.raises(onnx_safeify.Error, match="VALUE must be a positive integer"):
        onnx_safeify.compile(sample, "rx580", dims={"batch": 0})
    with pytest.raises(onnx_safeify.Error, match="VALUE must be a positive integer"):
        onnx_safeify.compile(sample, "rx580", dims={"batch": "one"})


def test_errors_carry_the_commands_message(tmp_path):
    missing = tmp_path / "nope.onnx"
    with pytest.raises(onnx_safeify.Error) as e:
        onnx_safeify.compile(missing, "rx580")
    assert isinstance(e.value, ValueError)
    code, _, err = run(str(missing), "--target", "rx580")
    assert code == 2
    assert str(e.value) == last_error_line(err)
    assert "\n" not in str(e.value)

    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07this is not a model")
    with pytest.raises(onnx_safeify.Error) as e:
        onnx_safeify.check(garbage, "rx580")
    code, _, err = run("check", str(garbage), "--target", "rx580")
    assert code == 2 and str(e.value) == last_error_line(err)

    with pytest.raises(onnx_safeify.Error, match="no-such-target"):
        onnx_safeify.compile(SAMPLE, "no-such-target")
    with pytest.raises(TypeError):
        onnx_safeify.compile(12, "rx580")


def test_rule_file_errors_are_a_summary_line_then_every_diagnostic(sample, tmp_path):
    rules = tmp_path / "bad.yaml"
    rules.write_text(
        "rules:\n"
        "  - id: typo\n"
        "    why: test\n"
        "    evidence: []\n"
        "    match: {op: Cnv}\n"
        "    action: cpu\n"
        "  - id: no-why\n"
        "    evidence: []\n"
        "    match: {op: Conv}\n"
        "    action: cpu\n"
    )
    with pytest.raises(onnx_safeify.Error) as e:
        onnx_safeify.check(sample, "none", rules=[rules])
    message = str(e.value)
    lines = message.splitlines()
    assert lines[0] == "2 errors in rule files", message
    assert "%s:5:17" % rules in message and "did you mean `Conv`?" in message
    assert "%s:7:5" % rules in message
    code, _, err = run("check", str(sample), "--target", "none", "--rules", str(rules))
    assert code == 2
    assert ("error: " + message) in err, "the command prints the same text after `error: `"


def test_the_console_scripts_verify_uses_this_environments_onnxruntime(sample, tmp_path):
    pytest.importorskip("onnxruntime", reason="verify needs ONNX Runtime")
    out = tmp_path / "out.onnx"
    assert run(str(sample), "--target", "rx580", "-o", str(out))[0] == 0
    # Nothing else that could lead to an onnxruntime: no library path, no active or project
    # venv, no interpreter on PATH. Only the interpreter that runs the console script.
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORT_DYLIB_PATH", "VIRTUAL_ENV", "ONNX_SAFEIFY_PYTHON")}
    env.update(PATH=str(tmp_path / "empty"), ONNX_SAFEIFY_VENV=str(tmp_path / "no-venv"),
               ONNX_SAFEIFY_CACHE=str(tmp_path / "no-cache"))
    p = subprocess.run([command(), "verify", str(sample), str(out)], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p.stderr
    runtime = [l for l in p.stdout.splitlines() if l.startswith("runtime:")]
    assert runtime and os.path.realpath(sys.prefix) in os.path.realpath(
        runtime[0].split("(", 1)[1].split(")", 1)[0]), p.stdout


def test_a_builtin_named_as_a_file_gets_a_hint(tmp_path):
    with pytest.raises(onnx_safeify.Error, match="use --target rx580"):
        onnx_safeify.check(SAMPLE, str(tmp_path / "rx580.yaml"))


def test_nodes_without_a_safe_rewrite_raise_unless_allowed(sample, tmp_path):
    rules = deny_conv(tmp_path)
    with pytest.raises(onnx_safeify.Error) as e:
        onnx_safeify.compile(sample, "rx580", rules=[rules])
    code, _, err = run(str(sample), "--target", "rx580", "--rules", str(rules))
    assert code == 1, "compile exits 1 when nodes are denied"
    assert str(e.value) == last_error_line(err)
    assert "nothing was written" in str(e.value)
    assert not (tmp_path / "ocr_tiny.rx580.onnx").exists()
    allowed = onnx_safeify.compile(sample, "rx580", rules=rules, allow_unsafe=True)
    assert any(f["kind"] == "denied" for f in allowed.report["remaining"])


def test_fallbacks_are_reported_and_strict_makes_them_block(sample, tmp_path):
    rules = tmp_path / "fallback.yaml"
    rules.write_text(
        "fallback: cpu\n"
        "rules:\n"
        "  - id: unfuse-conv\n"
        "    why: test - a Conv has no decomposition, so it falls back to the CPU\n"
        "    evidence: []\n"
        "    match: {op: Conv}\n"
        "    action: unfuse\n"
    )
    done = onnx_safeify.compile(sample, "none", rules=[rules])
    fell = done.report["fallbacks"]
    assert fell and all(f["to"] == "cpu" and f["cause"] == "no-rewrite" for f in fell)
    with pytest.raises(onnx_safeify.Error) as e:
        onnx_safeify.compile(sample, "none", rules=[rules], strict=True)
    code, _, err = run(str(sample), "--target", "none", "--rules", str(rules), "--strict")
    assert code == 1
    assert str(e.value) == last_error_line(err)
    assert "--strict" in str(e.value)
    with pytest.raises(onnx_safeify.Error, match="nchwc_block 0"):
        onnx_safeify.compile(sample, "none", nchwc_block=0)


def test_verify_a_compiled_model(sample):
    pytest.importorskip("onnxruntime", reason="verify needs ONNX Runtime")
    result = onnx_safeify.compile(sample, "rx580")
    report = onnx_safeify.verify(sample, result)
    assert report["passed"] is True, report
    assert report["runs"] and report["runs"][0]["outputs"]


def test_verify_catches_a_different_model(sample, tmp_path):
    pytest.importorskip("onnxruntime", reason="verify needs ONNX Runtime")
    onnx = pytest.importorskip("onnx")
    m = onnx.load(str(sample))
    # Negate one Conv weight: same graph, different function.
    for t in m.graph.initializer:
        if len(t.dims) == 4:
            from onnx import numpy_helper

            arr = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(-arr - 1, t.name))
            break
    else:
        pytest.fail("the sample has no 4-d initializer to alter")
    report = onnx_safeify.verify(sample, m)
    assert report["passed"] is False


def test_the_console_script_is_the_command(tmp_path):
    code, out, err = run()
    assert code == 2, "a bare invocation is a usage error"
    assert "Usage:" in err and out == ""
    code, out, _ = run("--version")
    assert code == 0 and out.strip() == "onnx-safeify " + onnx_safeify.__version__
    code, out, _ = run("--help")
    assert code == 0 and "Exit codes" in out


def test_allow_approximate_runs_a_precision_fence_and_the_report_says_so(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    w = numpy_helper.from_array(np.full((2, 2, 3, 3), 0.25, dtype=np.float16), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 2, 4, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    target = tmp_path / "fence.yaml"
    target.write_text(
        "target: fence-test\n"
        "description: test - compute float16 convolutions in float32\n"
        "extends: none\n"
        "rules:\n"
        "  - id: fence-fp16-conv\n"
        "    why: test\n"
        "    evidence: []\n"
        "    match: {op: Conv, any_input: {dtype: float16}}\n"
        "    action: {cast: {from: float16, to: float}}\n"
        "    fallback: cpu\n"
    )
    # By default the approximate rewrite is refused: the node falls back to the CPU.
    refused = onnx_safeify.compile(model, target).report
    assert refused["applied"] == [], refused
    assert [f["cause"] for f in refused["fallbacks"]] == ["approximate"], refused
    assert refused["exactness"] == "exact"
    assert refused["cost"]["output"]["heavy_ops_cpu"] == 1
    # Asked for: applied, with its class and bound, and the output says so.
    result = onnx_safeify.compile(model, target, allow_approximate=True)
    r = result.report
    assert [a["exactness"] for a in r["applied"]] == ["approximate"], r
    assert r["exactness"].startswith("approximate:"), r
    assert r["cost"]["output"]["heavy_ops_gpu"] == 1
    meta = {p.key: p.value for p in result.model.metadata_props}
    assert meta["onnx_safeify.exactness"] == r["exactness"]


def test_unknown_dims_warn_as_the_command_does(sample):
    with pytest.warns(UserWarning, match="--dim bogus: no input of .* has a dimension named 'bogus'"):
        onnx_safeify.compile(sample, "rx580", dims={"bogus": 1})
    with pytest.warns(UserWarning, match="its inputs. dimensions are named N"):
        onnx_safeify.check(sample, "rx580", dims={"bogus": 1})


def test_verify_without_onnxruntime_names_this_environment(sample, tmp_path):
    # An interpreter without onnxruntime that imports this wheel's module (copied for it), and
    # nothing else that could lead to an onnxruntime.
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / ("Scripts" if os.name == "nt" else "bin") / ("python.exe" if os.name == "nt" else "python")
    pkg = tmp_path / "pkg"
    shutil.copytree(os.path.dirname(onnx_safeify.__file__), pkg / "onnx_safeify")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORT_DYLIB_PATH", "VIRTUAL_ENV", "ONNX_SAFEIFY_PYTHON")}
    env.update(PYTHONPATH=str(pkg), PATH=str(tmp_path / "empty"),
               ONNX_SAFEIFY_VENV=str(tmp_path / "no-venv"),
               ONNX_SAFEIFY_CACHE=str(tmp_path / "no-cache"))
    code = ("import sys, onnx_safeify\n"
            "try:\n"
            "    onnx_safeify.verify(sys.argv[1], sys.argv[1])\n"
            "except onnx_safeify.Error as e:\n"
            "    print(e)\n")
    p = subprocess.run([str(py), "-c", code, str(sample)], capture_output=True, text=True,
                       env=env)
    assert "ONNX Runtime was not found" in p.stdout, p.stdout + p.stderr
    how = p.stdout.split("To get it:", 1)[1]
    assert "-m pip install onnxruntime" in how and str(venv) in how, p.stdout
    assert "no-venv" not in how, p.stdout
