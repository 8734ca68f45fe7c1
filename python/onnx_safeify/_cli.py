"""The ``onnx-safeify`` console script: the command line of the Rust library, unchanged."""

import os
import signal
import sys

from . import _native


def main():
    """Run ``onnx-safeify`` with this process's arguments and exit with its exit code."""
    # The command runs in Rust without returning to the interpreter: let Ctrl-C end it as it
    # ends the native binary, instead of waiting for Python's handler to get a turn.
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    # `verify` looks for ONNX Runtime in the onnxruntime package of this interpreter first
    # (src/runtime/run/discover.rs), so that the one installed beside the wheel is found without
    # the environment being activated. An explicit setting wins.
    if sys.executable and not os.environ.get("ONNX_SAFEIFY_PYTHON"):
        os.environ["ONNX_SAFEIFY_PYTHON"] = sys.executable
    sys.stdout.flush()
    sys.exit(_native.run_cli(["onnx-safeify"] + sys.argv[1:]))


if __name__ == "__main__":
    main()
