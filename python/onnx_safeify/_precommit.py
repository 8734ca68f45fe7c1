"""``onnx-safeify-check-files``: ``onnx-safeify check`` over several models, for pre-commit.

    onnx-safeify-check-files --target T [--rules FILE.yaml]... [--dim NAME=V]... MODEL...

Runs ``onnx-safeify check MODEL --target T ...`` on each model in turn (the same command line,
the same output) and exits with the worst code: 0 when every model is safe for the target,
1 when some model has findings, 2 when a model or the target could not be read.
"""

import argparse
import signal
import sys

from . import _native


def main(argv=None):
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    parser = argparse.ArgumentParser(
        prog="onnx-safeify-check-files",
        description="Run `onnx-safeify check --target T` on every MODEL given; exit with the worst code.",
    )
    parser.add_argument("--target", "-t", required=True, help="a built-in name or FILE.yaml")
    parser.add_argument("--rules", action="append", default=[], metavar="FILE.yaml")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("models", nargs="*", metavar="MODEL")
    args = parser.parse_args(argv)
    extra = ["--target", args.target]
    for r in args.rules:
        extra += ["--rules", r]
    for d in args.dim:
        extra += ["--dim", d]
    worst = 0
    for model in args.models:
        sys.stdout.flush()
        worst = max(worst, _native.run_cli(["onnx-safeify", "check", model] + extra))
    return worst


if __name__ == "__main__":
    sys.exit(main())
