#!/usr/bin/env bash
# Wheel smoke test: build the Python wheel from this checkout with maturin, install it into a
# fresh venv, and run the installed `onnx-safeify` command on the sample model. Exits non-zero
# as soon as a step fails.
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

# 1. maturin, in a venv of its own that later runs reuse (a maturin on PATH is used as is).
if command -v maturin >/dev/null; then
  MATURIN="$(command -v maturin)"
else
  BUILD_VENV="$CACHE/maturin-venv"
  if [ ! -x "$BUILD_VENV/bin/maturin" ]; then
    step "installing maturin into $BUILD_VENV"
    mkdir -p "$CACHE"
    "$PY" -m venv "$BUILD_VENV"
    "$BUILD_VENV/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2" \
      || fail "cannot install maturin"
  fi
  MATURIN="$BUILD_VENV/bin/maturin"
fi
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

# 3. A fresh venv; the wheel has no dependencies, so nothing else is downloaded.
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
step "wheel smoke passed: $(basename "$WHEEL"), output $(du -k "$OUT" | cut -f1) KiB"
