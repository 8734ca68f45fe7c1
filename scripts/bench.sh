#!/usr/bin/env bash
# Benchmarks (not tests): onnx-safeify against cp, Python onnx load+save (and with --peers
# onnxsim/onnxslim), side by side in one run: tools are interleaved run by run, every figure of a
# table comes from the same run. Reports median wall, median cpu (user + system) and peak private
# (anonymous) memory per tool, and each tool's wall/cpu as a multiple of cp's (or Python's).
#   scripts/bench.sh [--peers] [--big] [--callgrind]
#     --peers      add onnxsim and onnxslim on the 326 MB model (slow)
#     --big        also the 1.3 GB variant of the 326 MB model (written once by
#                  tools/bench_big_model.py into $CACHE/bench/; ~4 GB of memory while Python writes it)
#     --callgrind  the instruction count (valgrind's Ir) of the pin-every-Add compile of the
#                  50,000-node chain: a repeatable figure where wall time is noisy
# RUNS (default 7) sets the counted runs per tool.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
PEERS=() BIG=0 CALLGRIND=0
for a in "$@"; do
  case "$a" in
    --peers) PEERS=(--peers) ;;
    --big) BIG=1 ;;
    --callgrind) CALLGRIND=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
ONNX_SAFEIFY_CACHE="$CACHE" bash "$ROOT/scripts/corpus.sh" >/dev/null
cd "$ROOT"
cargo build --release --locked --bin onnx-safeify --bench phases
BIN="$ROOT/target/release/onnx-safeify"
PY="$CACHE/venv/bin/python"
SYN="$CACHE/corpus/synthetic"
DET="$CACHE/corpus/real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# A user rule that pins every Add to the CPU.
cat >"$TMP/pin-add.yaml" <<'EOF'
target: pin-add
description: pin every Add to the CPU (benchmark)
extends: none
rules:
  - id: pin-add
    why: benchmark
    evidence: [benchmark]
    match: {op: Add}
    action: cpu
EOF
bench() { "$PY" tools/bench_roundtrip.py --runs "${RUNS:-7}" "$@"; }
# `check` exits 1 when it has findings; its report goes to {out}.
check() { echo "$BIN check {model} --target $1 >{out}; test \$? -le 1"; }

big_models=("$SYN/syn_mobilenet_dw_300mb.onnx")
if [ "$BIG" = 1 ]; then
  B="$CACHE/bench/syn_mobilenet_dw_1300mb.onnx"
  if [ ! -s "$B" ]; then
    mkdir -p "$CACHE/bench"
    "$PY" tools/bench_big_model.py "$B.tmp" --blocks 3000 && mv "$B.tmp" "$B"
  fi
  big_models+=("$B")
fi
for m in "${big_models[@]}"; do
  echo "== $(basename "$m"): cp, Python onnx, onnx-safeify --target none / rx580 / pin every Add"
  bench --bin "$BIN" --model "$m" "${PEERS[@]}" --ratio-to cp \
    --cmd 'cp=cp {model} {out}' \
    --cmd "rx580=$BIN {model} --target rx580 -o {out} >/dev/null" \
    --cmd "pin-add=$BIN {model} --target $TMP/pin-add.yaml -o {out} >/dev/null"
  PEERS=()
done
echo "== syn_50k_nodes.onnx: Python onnx, onnx-safeify --target none / pin every Add / check rx580"
bench --bin "$BIN" --model "$SYN/syn_50k_nodes.onnx" --ratio-to onnx \
  --cmd "pin-add=$BIN {model} --target $TMP/pin-add.yaml -o {out} >/dev/null" \
  --cmd "check-rx580=$(check rx580)"
echo "== PP-OCRv4 det: check and compile, --target rx580"
bench --model "$DET" --ratio-to onnx \
  --cmd "check-rx580=$(check rx580)" \
  --cmd "compile-rx580=$BIN {model} --target rx580 -o {out} >/dev/null"
if [ "$CALLGRIND" = 1 ]; then
  echo "== instructions (callgrind Ir): syn_50k_nodes.onnx, pin every Add"
  valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" \
    "$BIN" "$SYN/syn_50k_nodes.onnx" --target "$TMP/pin-add.yaml" -o "$TMP/cg.onnx" \
    >/dev/null 2>"$TMP/cg.log"
  awk '/^(summary|totals):/ {print "Ir", $2; exit}' "$TMP/cg.out"
fi
echo "== in-process phases (load / import / export / save)"
cargo bench --locked --bench phases -- "$SYN/syn_mobilenet_dw_300mb.onnx" "$SYN/syn_50k_nodes.onnx"
