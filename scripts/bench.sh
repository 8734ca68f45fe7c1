#!/usr/bin/env bash
# Benchmarks (not tests): onnx-safeify against cp, Python onnx load+save (and with --peers
# onnxsim/onnxslim), side by side in one run: tools are interleaved run by run, in a new order
# each round, every figure of a table comes from the same run. Reports median wall, median cpu (user + system) and peak private
# (anonymous) memory per tool, and each tool's wall/cpu as a multiple of cp's (or Python's).
# On the large models `cp+37` is cp's copy written 37 bytes into the output: what moving the
# payloads costs the kernel's file-to-file copy when the nodes before them change size
# (onnx-safeify writes them from the mapped input instead, which costs what cp does).
#   scripts/bench.sh [--peers] [--big] [--callgrind] [--llm | --llm-only]
#     --peers      add onnxsim and onnxslim on the 326 MB model (slow)
#     --big        also two ~1.3 GB variants of the 326 MB model, written once by
#                  tools/bench_big_model.py into $CACHE/bench/ (~4 GB of memory while Python writes
#                  them): "deep", 4x the blocks (21,000 nodes), and "wide", 4x the bytes with the
#                  same 5,250 nodes (640 channels)
#     --callgrind  instruction counts (valgrind's Ir): the pin-every-Add compile and the rx580
#                  `check` of the 50,000-node chain, the rx580 compile of the 326 MB model (a
#                  repeatable figure where wall time is noisy; but fewer instructions are not
#                  always less time: a hash of fewer instructions made the import slower)
#     --llm        int4 decoders as onnxruntime-genai writes them (tools/make_llm.py: 1b, 0.7 GB,
#                  and 7b, 4.3 GB of external data, written once into $CACHE/bench/): cp of the
#                  folder, --target none / webgpu / rx580 with the output in the model's folder
#                  (weights shared) and in another folder (cloned or copied), check rx580, and
#                  the peers Python onnx load+save with external data and onnxruntime's
#                  transformers OnnxModel load+save (tools/bench_llm_peers.py); --llm-only
#                  runs these rows alone (LLM_RUNS, default 3, runs each)
# RUNS (default 7) sets the counted runs per tool. BEFORE=PATH adds the same commands run with
# another build of onnx-safeify (named "...-before"), interleaved in the same runs: a before/after
# table from one run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
PEERS=() BIG=0 CALLGRIND=0 LLM=0
for a in "$@"; do
  case "$a" in
    --peers) PEERS=(--peers) ;;
    --big) BIG=1 ;;
    --callgrind) CALLGRIND=1 ;;
    --llm) LLM=1 ;;
    --llm-only) LLM=2 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
ONNX_SAFEIFY_CACHE="$CACHE" bash "$ROOT/scripts/corpus.sh" >/dev/null
cd "$ROOT"
cargo build --release --locked --bin onnx-safeify --bench phases --example copy_shifted
BIN="$ROOT/target/release/onnx-safeify"
SHIFTED="$ROOT/target/release/examples/copy_shifted"
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
# --shuffle: a new order of the tools each round (the first of a round runs slower).
bench() { "$PY" tools/bench_roundtrip.py --runs "${RUNS:-7}" --shuffle "$@"; }
# `check` exits 1 when it has findings; its report goes to {out}.
check() { echo "$1 check {model} --target $2 >{out}; test \$? -le 1"; }

# `cmds NAME COMMAND`: --cmd arguments for this build, and for the BEFORE build when given
# (COMMAND names the binary as @BIN@).
cmds() {
  CMDS+=(--cmd "$1=${2//@BIN@/$BIN}")
  if [ -n "${BEFORE:-}" ]; then CMDS+=(--cmd "$1-before=${2//@BIN@/$BEFORE}"); fi
}
big_models=("$SYN/syn_mobilenet_dw_300mb.onnx")
if [ "$LLM" = 2 ]; then big_models=(); fi
if [ "$BIG" = 1 ]; then
  mkdir -p "$CACHE/bench"
  B="$CACHE/bench/syn_mobilenet_dw_1300mb.onnx"
  if [ ! -s "$B" ]; then
    "$PY" tools/bench_big_model.py "$B.tmp" --blocks 3000 && mv "$B.tmp" "$B"
  fi
  W="$CACHE/bench/syn_mobilenet_dw_1300mb_wide.onnx"
  if [ ! -s "$W" ]; then
    "$PY" tools/bench_big_model.py "$W.tmp" --blocks 750 --channels 640 && mv "$W.tmp" "$W"
  fi
  big_models+=("$B" "$W")
fi
for m in "${big_models[@]}"; do
  echo "== $(basename "$m"): cp, cp+37, Python onnx, onnx-safeify --target none / rx580 / pin every Add"
  # cp+37: the same kernel copy 37 bytes into the output (examples/copy_shifted.rs), the floor
  # of a file-to-file copy for a rewritten model, whose payloads move by however much the nodes
  # grew (onnx-safeify's writes from the map go below it).
  CMDS=(--cmd 'cp=cp {model} {out}' --cmd "cp+37=$SHIFTED {model} {out}")
  cmds none "@BIN@ {model} --target none -o {out}"
  cmds rx580 "@BIN@ {model} --target rx580 -o {out}"
  cmds pin-add "@BIN@ {model} --target $TMP/pin-add.yaml -o {out}"
  bench --model "$m" "${PEERS[@]}" --ratio-to cp "${CMDS[@]}"
  PEERS=()
done
if [ "$LLM" != 0 ]; then
  for size in 1b 7b; do
    D="$CACHE/bench/llm-$size"
    if [ ! -s "$D/model.onnx" ]; then
      rm -rf "$D.tmp" && "$PY" tools/make_llm.py "$D.tmp" --size "$size" && mv "$D.tmp" "$D"
    fi
    echo "== llm-$size ($(du -sh "$D" | cut -f1)): cp -r of the folder, onnx-safeify (in the folder: weights shared; elsewhere: cloned or copied), Python peers"
    CMDS=(--cmd "cp=cp -r $D {out}.d && cp $D/model.onnx {out}")
    for t in none webgpu rx580; do
      # In the model's folder (the default output place); {out} gets a copy of the small model.
      cmds "$t" "@BIN@ {model} --target $t -o $D/model.$t.onnx >/dev/null 2>&1 && cp $D/model.$t.onnx {out}"
      # In another folder: the data file is cloned where the file system can, else copied.
      cmds "$t-elsewhere" "@BIN@ {model} --target $t -o {out}"
    done
    cmds check-rx580 "$(check @BIN@ rx580)"
    CMDS+=(--cmd "py-onnx=$PY tools/bench_llm_peers.py onnx {model} {out}")
    CMDS+=(--cmd "py-ort-transformers=$PY tools/bench_llm_peers.py ort {model} {out}")
    RUNS="${LLM_RUNS:-3}" bench --model "$D/model.onnx" --no-baseline --tmpdir "$CACHE/bench" \
      --ratio-to cp "${CMDS[@]}"
  done
  if [ "$LLM" = 2 ]; then exit 0; fi
fi
echo "== syn_50k_nodes.onnx: Python onnx, onnx-safeify pin every Add / check rx580"
CMDS=()
cmds pin-add "@BIN@ {model} --target $TMP/pin-add.yaml -o {out}"
cmds check-rx580 "$(check @BIN@ rx580)"
bench --model "$SYN/syn_50k_nodes.onnx" --ratio-to onnx "${CMDS[@]}"
echo "== PP-OCRv4 det: check and compile, --target rx580"
CMDS=()
cmds check-rx580 "$(check @BIN@ rx580)"
cmds compile-rx580 "@BIN@ {model} --target rx580 -o {out}"
bench --model "$DET" --ratio-to onnx "${CMDS[@]}"
if [ "$CALLGRIND" = 1 ]; then
  # `ir BIN MODEL TARGET [check]`: the instruction count of one compile (or one `check`).
  ir() {
    local cmd=("$1" "$2" --target "$3" -o "$TMP/cg.onnx")
    if [ "${4:-}" = check ]; then cmd=("$1" check "$2" --target "$3"); fi
    valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "${cmd[@]}" \
      >/dev/null 2>"$TMP/cg.log" || true
    awk '/^(summary|totals):/ {print $2; exit}' "$TMP/cg.out"
  }
  echo "== instructions (callgrind Ir)"
  for w in "syn_50k_nodes.onnx $TMP/pin-add.yaml" "syn_50k_nodes.onnx rx580 check" \
    "syn_mobilenet_dw_300mb.onnx rx580"; do
    set -- $w
    line="${3:-compile} $1 --target $(basename "$2"): Ir $(ir "$BIN" "$SYN/$1" "$2" "${3:-}")"
    if [ -n "${BEFORE:-}" ]; then
      line="$line (before: $(ir "$BEFORE" "$SYN/$1" "$2" "${3:-}"))"
    fi
    echo "$line"
  done
fi
echo "== in-process phases (load / import / export / save)"
cargo bench --locked --bench phases -- "$SYN/syn_mobilenet_dw_300mb.onnx" "$SYN/syn_50k_nodes.onnx"
