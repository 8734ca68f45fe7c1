#!/usr/bin/env bash
# What `onnx-safeify verify --runtime webgpu|openvino` and the WebGPU tests need; idempotent
# (a second run changes nothing and only checks):
# - Chromium from the distribution (apt-get install -y chromium) when `chromium` is missing;
# - the web harness tools/webgpu: onnxruntime-web and playwright-core at the versions pinned
#   in tools/webgpu/package-lock.json (`npm ci`; Node.js and npm must be installed);
# - OpenVINO (openvino==2026.4.1) into the test venv ($ONNX_SAFEIFY_VENV, default
#   ~/.cache/onnx-safeify/venv, which scripts/test.sh creates).
# The harness serves its page on 127.0.0.1 only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
VENV="${ONNX_SAFEIFY_VENV:-$CACHE/venv}"
OPENVINO_VERSION=2026.4.1
say() { echo "setup-runtimes: $*"; }
fail() { echo "setup-runtimes: $*" >&2; exit 2; }

# 1. Chromium
if command -v chromium >/dev/null 2>&1; then
  say "chromium present ($(command -v chromium))"
else
  command -v apt-get >/dev/null 2>&1 || fail "chromium is missing and apt-get is not available; install Chromium and put it on PATH (or set ONNX_SAFEIFY_CHROMIUM)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || fail "chromium is missing; run as root or install sudo"
    SUDO="sudo"
  fi
  say "installing chromium with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  command -v chromium >/dev/null 2>&1 || fail "apt-get installed no chromium command"
fi

# 2. The web harness (exact versions from the committed lockfile)
command -v npm >/dev/null 2>&1 || fail "npm is missing; install Node.js 20 or later with npm"
HARNESS="$ROOT/tools/webgpu"
STAMP="$HARNESS/node_modules/.safeify-lock"
if [ -f "$STAMP" ] && cmp -s "$STAMP" "$HARNESS/package-lock.json" \
   && [ -f "$HARNESS/node_modules/onnxruntime-web/package.json" ] \
   && [ -f "$HARNESS/node_modules/playwright-core/package.json" ]; then
  say "web harness up to date ($HARNESS/node_modules)"
else
  say "npm ci in $HARNESS"
  # --ignore-scripts: nothing to build, and playwright must not download its own browsers
  (cd "$HARNESS" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  cp "$HARNESS/package-lock.json" "$STAMP"
fi

# 3. OpenVINO in the venv
if [ ! -x "$VENV/bin/python" ]; then
  say "NOT installing openvino: the venv $VENV does not exist yet (scripts/test.sh creates it and then runs this script again; or set ONNX_SAFEIFY_VENV)"
elif [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("openvino"))' 2>/dev/null || true)" = "$OPENVINO_VERSION" ]; then
  say "openvino $OPENVINO_VERSION present in $VENV"
else
  say "installing openvino==$OPENVINO_VERSION into $VENV"
  "$VENV/bin/python" -m pip install -q "openvino==$OPENVINO_VERSION"
fi
say "ready"
