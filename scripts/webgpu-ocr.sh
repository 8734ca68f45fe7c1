#!/usr/bin/env bash
# The rx580 outputs of the corpus OCR models (PP-OCR det/rec/cls, as published and as
# ONNX Runtime-optimised) on onnxruntime-web's WebGPU provider in headless Chromium, each
# verified against the original on ONNX Runtime CPU; prints the verdict, the time and where
# the runtime placed the nodes. det takes ~20 s per model on 2 cores: this is a script, not a
# test (the tests run cls and rec).
#   scripts/webgpu-ocr.sh [PATTERN] [VERIFY OPTIONS...]   # PATTERN e.g. det, ort_all; "" for all
#   scripts/webgpu-ocr.sh "" --webgpu-pins force-cpu-node-names
# Needs scripts/setup-runtimes.sh and the corpus (scripts/test.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
CORPUS="${ONNX_SAFEIFY_CORPUS:-$CACHE/corpus}"
PATTERN="${1:-}"
shift || true
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
  ORT_DYLIB_PATH="$(ls "$CACHE"/venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -n 1 || true)"
  export ORT_DYLIB_PATH
fi
cd "$ROOT"
BIN="${ONNX_SAFEIFY_BIN:-}"   # a binary already built; default: build the release one
if [ -z "$BIN" ]; then
  cargo build --release --locked --quiet
  BIN="$ROOT/target/release/onnx-safeify"
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
for model in "$CORPUS"/real/*_infer*.onnx "$CORPUS"/ort_optimized/*_infer*.onnx; do
  name="$(basename "$model" .onnx)"
  case "$name" in *"$PATTERN"*) ;; *) continue ;; esac
  dims=()
  case "$name" in
    *det*) dims=(--dim "x[2]=320" --dim "x[3]=320") ;;
    *rec*) dims=(--dim "x[3]=320") ;;
  esac
  "$BIN" "$model" --target rx580 -o "$OUT/$name.rx580.onnx" >/dev/null 2>&1
  start=$(date +%s%N)
  set +e
  "$BIN" verify "$model" "$OUT/$name.rx580.onnx" --runtime webgpu "${dims[@]}" "$@" --format json >"$OUT/$name.json" 2>"$OUT/$name.err"
  rc=$?
  set -e
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%s  exit %d  %d.%01d s\n' "$name" "$rc" $((ms / 1000)) $(((ms % 1000) / 100))
  if [ "$rc" -eq 2 ]; then sed 's/^/    /' "$OUT/$name.err"; continue; fi
  python3 - "$OUT/$name.json" <<'PY'
import collections, json, sys
r = json.load(open(sys.argv[1]))
ext = r["rewritten_runtime"]
p = ext.get("placement") or {}
print("    placement:", ", ".join(f'{e["provider"]} {e["nodes"]}' for e in p.get("providers", [])))
cpu = p.get("cpu_nodes", [])
pinned = collections.Counter(n["op"] for n in cpu if n["pinned"])
other = collections.Counter(n["op"] for n in cpu if not n["pinned"])
if pinned: print("    on CPU, pinned by layer_ann:", dict(pinned))
if other: print("    on CPU, by the runtime:", dict(other), [n["name"] for n in cpu if not n["pinned"]][:8])
worst = max((o.get("max_abs_err") or 0.0) for run in r["runs"] for o in run["outputs"])
print(f"    passed {r['passed']}, worst abs error {worst:.3g}, run seconds {[round(s, 2) for s in ext['run_seconds']]}")
PY
done
