#!/usr/bin/env bash
# Benchmarks (not tests): onnx-safeify against Python onnx load+save, side by side, same run.
#   scripts/bench.sh [--peers]     (--peers adds onnxsim and onnxslim; slow)
# Reports wall time and peak private (anonymous) memory per tool, for the 326 MB synthetic
# model and the 50,000-node model of the corpus, then the in-process phase timings.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
ONNX_SAFEIFY_CACHE="$CACHE" bash "$ROOT/scripts/corpus.sh" >/dev/null
cd "$ROOT"
cargo build --release --locked --bin onnx-safeify --bench phases
for m in syn_mobilenet_dw_300mb.onnx syn_50k_nodes.onnx; do
  echo "== $m"
  "$CACHE/venv/bin/python" tools/bench_roundtrip.py --bin target/release/onnx-safeify \
    --model "$CACHE/corpus/synthetic/$m" --runs "${RUNS:-7}" "$@"
done
echo "== in-process phases (load / import / export / save)"
cargo bench --locked --bench phases -- "$CACHE/corpus/synthetic/syn_mobilenet_dw_300mb.onnx" "$CACHE/corpus/synthetic/syn_50k_nodes.onnx"
