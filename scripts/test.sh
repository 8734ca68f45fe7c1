#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs them.
#   scripts/test.sh [extra cargo test arguments]
# - builds the test corpus and a Python venv (onnx, onnxruntime, numpy, onnxsim, onnxslim; all
#   pinned) with scripts/corpus.sh into a cache folder ($ONNX_SAFEIFY_CACHE, default
#   ~/.cache/onnx-safeify); a second run reuses it;
# - points the tests at them (ONNX_SAFEIFY_CORPUS, ONNX_SAFEIFY_VENV, ORT_DYLIB_PATH);
# - sets up the other runtimes with scripts/setup-runtimes.sh (Chromium through apt, which
#   needs root or sudo; the web harness, which needs Node.js 20+ with npm; OpenVINO through
#   pip). One that cannot be installed here is skipped loudly: the suite still runs, and the
#   tests of that runtime skip, each naming what is missing
#   (ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1). Under CI (CI=true, as .ci/run sets) every
#   runtime is required and a setup failure stops the run;
# - runs `cargo test` (Rust crates come from crates.io through Cargo.lock), without Cargo's
#   incremental caches unless CARGO_INCREMENTAL is set (they would add about 0.7 GB to target/
#   for a run that builds once).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
command -v cargo >/dev/null || { echo "scripts/test.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 2; }
echo "== corpus and venv in $CACHE"
ONNX_SAFEIFY_CACHE="$CACHE" bash "$ROOT/scripts/corpus.sh"
export ONNX_SAFEIFY_CACHE="$CACHE"
export ONNX_SAFEIFY_CORPUS="$CACHE/corpus"
export ONNX_SAFEIFY_VENV="$CACHE/venv"
export ONNX_SAFEIFY_OVEP_VENV="${ONNX_SAFEIFY_OVEP_VENV:-$CACHE/ovep-venv}"
ORT_LIB="$(ls "$CACHE"/venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -n 1 || true)"
if [ -n "$ORT_LIB" ]; then export ORT_DYLIB_PATH="$ORT_LIB"; fi
# Chromium, the web harness, OpenVINO (verify --runtime): exit 3 means some could not be
# installed here (never under CI, where that is exit 2 and stops the run).
RC=0
bash "$ROOT/scripts/setup-runtimes.sh" || RC=$?
if [ "$RC" = 3 ]; then
  export ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1
  echo "== !!!!!!!! some runtimes are missing (listed above): their tests will be SKIPPED" >&2
elif [ "$RC" != 0 ]; then
  exit "$RC"
fi
cd "$ROOT"
echo "== cargo test"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo test --locked "$@"
