#!/usr/bin/env bash
# What `onnx-safeify verify --runtime webgpu|openvino` and the WebGPU tests need; idempotent
# (a second run changes nothing and only checks):
# - Chromium from the distribution (apt-get install -y chromium, as root or through sudo) when
#   neither `chromium` on PATH nor $ONNX_SAFEIFY_CHROMIUM names one;
# - the web harness tools/webgpu: onnxruntime-web and playwright-core at the versions pinned
#   in tools/webgpu/package-lock.json (`npm ci`; Node.js 20 or later with npm must be
#   installed);
# - OpenVINO (openvino==2026.4.1) into the test venv ($ONNX_SAFEIFY_VENV, default
#   $ONNX_SAFEIFY_CACHE/venv, i.e. ~/.cache/onnx-safeify/venv, which scripts/test.sh creates);
# - ONNX Runtime's OpenVINO provider (onnxruntime-openvino==1.24.1 with numpy and onnx) in a venv
#   of its own ($ONNX_SAFEIFY_OVEP_VENV, default $ONNX_SAFEIFY_CACHE/ovep-venv): that wheel
#   ships its own `onnxruntime` module and cannot share the test venv.
# The harness serves its page on 127.0.0.1 only.
#
# A runtime that cannot be installed here (no root or sudo for apt, no Node.js/npm, pip
# failing) is skipped loudly, naming what is missing, and the script goes on with the others.
# Exit code: 0 every runtime ready; 3 some runtime missing (scripts/test.sh then lets the
# tests of that runtime skip loudly); 2 an error, or any runtime missing under CI (CI=true,
# as .ci/run sets): CI requires them all.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
VENV="${ONNX_SAFEIFY_VENV:-$CACHE/venv}"
OPENVINO_VERSION=2026.4.1
OVEP_VENV="${ONNX_SAFEIFY_OVEP_VENV:-$CACHE/ovep-venv}"
OVEP_PACKAGES=(onnxruntime-openvino==1.24.1 numpy==2.4.6 onnx==1.19.1)
NODE_MAJOR_MIN=20
MISSING=()
say() { echo "setup-runtimes: $*"; }
# missing RUNTIME WHAT: RUNTIME cannot be set up here because of WHAT (what to install).
missing() {
  MISSING+=("$1: $2")
  echo "setup-runtimes: !!!!!!!! NOT INSTALLED ($1): $2" >&2
}
under_ci() { case "${CI:-}" in true | 1 | yes) return 0 ;; *) return 1 ;; esac; }

# 1. Chromium (the webgpu runtime)
if [ -n "${ONNX_SAFEIFY_CHROMIUM:-}" ] && [ -x "${ONNX_SAFEIFY_CHROMIUM}" ]; then
  say "chromium present ($ONNX_SAFEIFY_CHROMIUM, from ONNX_SAFEIFY_CHROMIUM)"
elif command -v chromium >/dev/null 2>&1; then
  say "chromium present ($(command -v chromium))"
else
  SUDO=""
  CAN=1
  if ! command -v apt-get >/dev/null 2>&1; then
    missing webgpu "Chromium (no chromium on PATH, and no apt-get to install it: install Chromium and put it on PATH, or set ONNX_SAFEIFY_CHROMIUM)"
    CAN=0
  elif [ "$(id -u)" -ne 0 ]; then
    # sudo without a password prompt, or with one when someone is at the terminal.
    if command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
      SUDO="sudo"
    else
      missing webgpu "Chromium (no chromium on PATH; installing it with apt-get needs root or sudo: run 'sudo apt-get install chromium', or set ONNX_SAFEIFY_CHROMIUM)"
      CAN=0
    fi
  fi
  if [ "$CAN" = 1 ]; then
    say "installing chromium with ${SUDO:+sudo }apt-get"
    if $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
       && command -v chromium >/dev/null 2>&1; then
      say "chromium installed ($(command -v chromium))"
    else
      missing webgpu "Chromium (apt-get install chromium failed or installed no chromium command)"
    fi
  fi
fi

# 2. The web harness (exact versions from the committed lockfile; the webgpu runtime)
HARNESS="$ROOT/tools/webgpu"
STAMP="$HARNESS/node_modules/.safeify-lock"
if [ -f "$STAMP" ] && cmp -s "$STAMP" "$HARNESS/package-lock.json" \
   && [ -f "$HARNESS/node_modules/onnxruntime-web/package.json" ] \
   && [ -f "$HARNESS/node_modules/playwright-core/package.json" ]; then
  say "web harness up to date ($HARNESS/node_modules)"
elif ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  missing webgpu "Node.js $NODE_MAJOR_MIN or later with npm (node/npm not on PATH), for the web harness in tools/webgpu"
elif ! node -e "process.exit(+process.versions.node.split('.')[0] >= $NODE_MAJOR_MIN ? 0 : 1)" 2>/dev/null; then
  missing webgpu "Node.js $NODE_MAJOR_MIN or later (found $(node --version 2>/dev/null || echo '?')), for the web harness in tools/webgpu"
else
  say "npm ci in $HARNESS"
  # --ignore-scripts: nothing to build, and playwright must not download its own browsers
  if (cd "$HARNESS" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
    cp "$HARNESS/package-lock.json" "$STAMP"
  else
    missing webgpu "the web harness's packages (npm ci in $HARNESS failed; see above)"
  fi
fi

# 3. OpenVINO in the venv (the openvino runtime)
if [ ! -x "$VENV/bin/python" ]; then
  missing openvino "the venv $VENV (scripts/test.sh creates it with scripts/corpus.sh, then runs this script; or set ONNX_SAFEIFY_VENV)"
elif [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("openvino"))' 2>/dev/null || true)" = "$OPENVINO_VERSION" ]; then
  say "openvino $OPENVINO_VERSION present in $VENV"
else
  say "installing openvino==$OPENVINO_VERSION into $VENV"
  if ! "$VENV/bin/python" -m pip install -q "openvino==$OPENVINO_VERSION"; then
    missing openvino "openvino==$OPENVINO_VERSION in $VENV (pip install failed; see above)"
  fi
fi

# 4. ONNX Runtime's OpenVINO provider (the placement check and the openvino-gpu manifests)
if [ "$("$OVEP_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("onnxruntime-openvino"))' 2>/dev/null || true)" = "1.24.1" ]; then
  say "onnxruntime-openvino 1.24.1 present in $OVEP_VENV"
else
  say "installing ${OVEP_PACKAGES[*]} into $OVEP_VENV"
  if ! { python3 -m venv "$OVEP_VENV" && "$OVEP_VENV/bin/python" -m pip install -q "${OVEP_PACKAGES[@]}"; }; then
    missing ort-openvino "${OVEP_PACKAGES[*]} in $OVEP_VENV (venv or pip install failed; see above)"
  fi
fi

if [ "${#MISSING[@]}" -eq 0 ]; then
  say "ready"
  exit 0
fi
{
  echo "setup-runtimes: !!!!!!!! ${#MISSING[@]} thing(s) could not be installed:"
  for m in "${MISSING[@]}"; do echo "setup-runtimes:   - $m"; done
} >&2
if under_ci; then
  echo "setup-runtimes: CI=${CI}: every runtime is required; failing" >&2
  exit 2
fi
echo "setup-runtimes: the tests of the runtimes above will be skipped, each saying what is missing" >&2
exit 3
