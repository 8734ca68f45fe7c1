#!/usr/bin/env bash
# Wheel test: build the Python wheel from this checkout with maturin, install it into a fresh
# venv, run the installed `onnx-safeify` command on the sample model, then the Python module's
# tests (python/tests, with the pinned python/requirements-test.txt). Exits non-zero as soon
# as a step fails.
#   scripts/wheel_smoke.sh
# Environment (all optional):
#   CARGO_TARGET_DIR            reused when set: with a warm target the build takes seconds
#   ONNX_SAFEIFY_WHEEL_PROFILE  cargo profile of the binary: `release` (default, what users get)
#                               or e.g. `dev` to reuse what `cargo test` already built
#   ONNX_SAFEIFY_CACHE          where the maturin venv is kept between runs
#                               (default ~/.cache/onnx-safeify)
#   PYTHON                      the interpreter that makes the venvs (default python3)
#   KEEP_WHEEL_WORK=1           keep the work folder (wheel, venv, outputs) for a look
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
PROFILE="${ONNX_SAFEIFY_WHEEL_PROFILE:-release}"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
START=$SECONDS
MATURIN_VERSION=1.16.0

fail() { echo "wheel_smoke: $*" >&2; exit 1; }
step() { echo "== [$((SECONDS - START))s] $*"; }

command -v "$PY" >/dev/null || fail "$PY not found"
command -v cargo >/dev/null || fail "cargo not found; install Rust from https://rustup.rs"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/onnx-safeify-wheel.XXXXXX")"
cleanup() {
  if [ "${KEEP_WHEEL_WORK:-0}" = 1 ]; then
    echo "wheel_smoke: work folder kept at $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

# 1. maturin (pinned), in a venv of its own that later runs reuse.
BUILD_VENV="$CACHE/maturin-venv"
if ! "$BUILD_VENV/bin/maturin" --version 2>/dev/null | grep -qx "maturin $MATURIN_VERSION"; then
  step "installing maturin $MATURIN_VERSION into $BUILD_VENV"
  mkdir -p "$CACHE"
  "$PY" -m venv "$BUILD_VENV"
  "$BUILD_VENV/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION" \
    || fail "cannot install maturin"
fi
MATURIN="$BUILD_VENV/bin/maturin"
step "$("$MATURIN" --version)"

# 2. The wheel, from source.
if [ "$PROFILE" = release ]; then
  PROFILE_ARGS=(--release)
else
  PROFILE_ARGS=(--profile "$PROFILE")
fi
step "building the wheel (profile $PROFILE, target ${CARGO_TARGET_DIR:-$ROOT/target})"
"$MATURIN" build "${PROFILE_ARGS[@]}" --locked --manifest-path "$ROOT/Cargo.toml" \
  --out "$WORK/wheels" || fail "maturin build failed"
shopt -s nullglob
WHEELS=("$WORK"/wheels/onnx_safeify-*.whl)
[ "${#WHEELS[@]}" -eq 1 ] || fail "expected one wheel in $WORK/wheels, found ${#WHEELS[@]}"
WHEEL="${WHEELS[0]}"
step "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"

# 3. A fresh venv: the wheel (no dependencies), then what the Python tests use.
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$WHEEL" \
  || fail "pip cannot install $WHEEL"
EXE="$WORK/venv/bin/onnx-safeify"
[ -x "$EXE" ] || fail "the wheel did not install an onnx-safeify command in the venv's bin/"
step "installed $EXE ($(du -k "$EXE" | cut -f1) KiB)"

# 4. The installed command, on the sample (run from another folder: nothing from the checkout
#    but the sample model is used).
cd "$WORK"
"$EXE" --version
TARGETS="$("$EXE" targets)" || fail "'onnx-safeify targets' failed"
echo "$TARGETS"
for t in none directml rx580; do
  grep -q "^$t " <<<"$TARGETS" || fail "'onnx-safeify targets' does not list $t"
done
OUT="$WORK/out/ocr_tiny.rx580.onnx"
mkdir -p "$WORK/out"
"$EXE" "$ROOT/samples/ocr_tiny.onnx" --target rx580 -o "$OUT" --report "$WORK/out/report.json" \
  || fail "compiling the sample for rx580 failed"
[ -s "$OUT" ] || fail "no output at $OUT"
"$EXE" check "$OUT" --target rx580 || fail "the compiled sample does not check clean for rx580"
"$EXE" inspect "$OUT" --format json | "$WORK/venv/bin/python" -c '
import json, sys
s = json.load(sys.stdin)
assert s["nodes"] > 76, s["nodes"]
assert s["inputs"][0]["name"] == "x"
' || fail "inspect --format json of the output is not what was expected"
"$WORK/venv/bin/python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["target"] == "rx580" and r["applied"], r
' "$WORK/out/report.json" || fail "the --report JSON is not what was expected"
"$EXE" completions bash | grep -q "complete -F" || fail "completions bash failed"
"$EXE" man | head -n 1 | grep -q '^\.TH' || fail "man failed"
step "the installed command works: output $(du -k "$OUT" | cut -f1) KiB"

# 5. The Python module's tests, against the installed wheel (from another folder, so that
#    `import onnx_safeify` cannot pick up the checkout's python/ folder).
step "installing python/requirements-test.txt"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/python/requirements-test.txt" \
  || fail "pip cannot install python/requirements-test.txt"
step "python -m pytest python/tests"
ONNX_SAFEIFY_SAMPLE="$ROOT/samples/ocr_tiny.onnx" "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests" || fail "the Python tests failed"
step "wheel test passed: $(basename "$WHEEL")"
