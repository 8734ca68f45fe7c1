#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs them.
#   scripts/test.sh [extra cargo test arguments]
# - builds the test corpus and a Python venv (onnx, onnxruntime, numpy, onnxsim, onnxslim; all
#   pinned) with scripts/corpus.sh into a cache folder ($ONNX_SAFEIFY_CACHE, default
#   ~/.cache/onnx-safeify); a second run reuses it;
# - points the tests at them (ONNX_SAFEIFY_CORPUS, ONNX_SAFEIFY_VENV, ORT_DYLIB_PATH);
# - runs `cargo test` (Rust crates come from crates.io through Cargo.lock).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
command -v cargo >/dev/null || { echo "scripts/test.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 2; }
echo "== corpus and venv in $CACHE"
ONNX_SAFEIFY_CACHE="$CACHE" bash "$ROOT/scripts/corpus.sh"
export ONNX_SAFEIFY_CACHE="$CACHE"
export ONNX_SAFEIFY_CORPUS="$CACHE/corpus"
export ONNX_SAFEIFY_VENV="$CACHE/venv"
ORT_LIB="$(ls "$CACHE"/venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -n 1 || true)"
if [ -n "$ORT_LIB" ]; then export ORT_DYLIB_PATH="$ORT_LIB"; fi
bash "$ROOT/scripts/setup-runtimes.sh"  # Chromium, the web harness, OpenVINO (verify --runtime)
cd "$ROOT"
echo "== cargo test"
cargo test --locked "$@"
