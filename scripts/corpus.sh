#!/usr/bin/env bash
# Installs what the tests need: a Python venv and the test corpus, in a cache folder.
#   scripts/corpus.sh            (or ONNX_SAFEIFY_CACHE=DIR scripts/corpus.sh)
# Writes, under $ONNX_SAFEIFY_CACHE (default ~/.cache/onnx-safeify):
#   venv/     Python with onnx, onnxruntime (whose libonnxruntime.so `verify` loads), numpy, and
#             onnxsim / onnxslim for the side-by-side benchmarks; every version pinned below
#   corpus/   real/ (3 PP-OCR models), extra/ (silero-vad's and magika's models),
#             ort_optimized/ (them saved by ONNX Runtime at three
#             optimisation levels), contrib/ (tiny com.microsoft models + numpy reference
#             results), synthetic/ (326 MB depthwise stack, 50,000-node chain), quantized/ (the
#             real and two small models quantized by onnxruntime.quantization, dynamic and
#             static, and saved by ONNX Runtime at three optimisation levels),
#             onnx_node_tests_1.19.1/ (the ONNX backend node tests), node_tests_results.json
# Everything comes from PyPI. Downloads and the models built from fixed seeds are checked
# against sha256 sums (here and in tools/corpus.sha256); a mismatch stops the script.
# Idempotent: each step leaves a stamp and is skipped on the next run; the last one writes
# corpus/.complete, which the tests look for. Needs ~1.5 GB of disk and a few minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
PY="${PYTHON:-python3}"
VENV="$CACHE/venv"
CORPUS="$CACHE/corpus"
WHEELS="$CACHE/wheels"
START=$SECONDS

say() { echo "corpus: [$((SECONDS - START))s] $*"; }
die() { echo "corpus: $*" >&2; exit 1; }

# The venv's packages. onnx and onnxruntime are the versions the tests were written against.
# onnx-ir: ONNX Runtime's MatMulNBits quantizer imports it (the transformer corpus's int4 models).
VENV_PACKAGES=(onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6 protobuf==7.36.2 ml_dtypes==0.6.0
  onnxsim==0.8.1 onnxslim==0.1.98 onnx-ir==1.1.0)
# The wheel that holds the PP-OCR models (pure Python: one file for every platform).
RAPIDOCR_WHEEL_SHA256=971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf
# The backend node tests: a digest over every file's relative path and sha256, sorted (the
# onnx wheel itself differs per platform and Python version; its test data does not).
NODE_TESTS_DIGEST=c329aa0d81b71f3e2bae0a8f5caa98dbdd1a7e03b884c1a822fa439f77eb8466

command -v "$PY" >/dev/null || die "$PY not found (set PYTHON to a Python 3.9+ interpreter)"
mkdir -p "$CACHE" "$CORPUS" "$WHEELS"
# Raised whenever a step is added: a corpus completed by an older version of this script gets
# the new steps (the steps it has are stamped and skipped).
CORPUS_VERSION=5
if [ "$(cat "$CORPUS/.complete" 2>/dev/null)" = "$CORPUS_VERSION" ] && [ -x "$VENV/bin/python" ]; then
  say "complete in $CORPUS (delete it to rebuild)"
  exit 0
fi

stamp() { [ -f "$CORPUS/.step-$1" ]; }
done_step() { touch "$CORPUS/.step-$1"; }

# 1. The venv (stamped with its package list: a changed list installs again).
VENV_STAMP="venv-$(printf '%s\n' "${VENV_PACKAGES[@]}" | sha256sum | cut -c1-12)"
if ! stamp "$VENV_STAMP" || [ ! -x "$VENV/bin/python" ]; then
  say "venv in $VENV"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${VENV_PACKAGES[@]}" \
    || die "pip could not install ${VENV_PACKAGES[*]}"
  done_step "$VENV_STAMP"
fi
VPY="$VENV/bin/python"

# 2. The two wheels that carry data.
if ! stamp wheels; then
  say "downloading rapidocr-onnxruntime 1.4.4 and onnx 1.19.1 wheels into $WHEELS"
  "$VPY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$WHEELS" rapidocr-onnxruntime==1.4.4 onnx==1.19.1 || die "pip download failed"
  (cd "$WHEELS" && echo "$RAPIDOCR_WHEEL_SHA256  rapidocr_onnxruntime-1.4.4-py3-none-any.whl" \
    | sha256sum -c --quiet -) || die "sha256 mismatch: $WHEELS/rapidocr_onnxruntime-1.4.4-py3-none-any.whl"
  done_step wheels
fi

# Checks the files tools/corpus.sha256 lists under one folder of the corpus.
check_sums() {
  local dir="$1"
  (cd "$CORPUS" && grep " $dir/" "$ROOT/tools/corpus.sha256" | sha256sum -c --quiet -) \
    || die "sha256 mismatch under $CORPUS/$dir (see tools/corpus.sha256)"
}

# 2b. Real models from other packages (speech: silero-vad, whose If bodies hold convolutions;
# file-type detection: magika). Only the .onnx files are kept; their sums are in
# tools/corpus.sha256 (magika's wheel is per platform, its model is not).
if ! stamp extra; then
  say "downloading silero-vad 6.2.0 and magika 1.0.3 wheels into $WHEELS"
  "$VPY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$WHEELS" silero-vad==6.2.0 || die "pip download silero-vad failed"
  "$VPY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 -d "$WHEELS" magika==1.0.3 || die "pip download magika failed"
  mkdir -p "$CORPUS/extra"
  "$VPY" - "$WHEELS" "$CORPUS/extra" <<'PY' || die "cannot extract the extra models"
import sys, zipfile, pathlib
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for whl, prefix in [("silero_vad-6.2.0-py3-none-any.whl", "silero_vad__"),
                    ("magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl", "magika__")]:
    with zipfile.ZipFile(wheels / whl) as z:
        for name in z.namelist():
            if name.endswith(".onnx"):
                stem = "/".join(name.split("/")[-2:]).replace("/", "__") if prefix == "magika__" else name.split("/")[-1]
                (out / (prefix + stem)).write_bytes(z.read(name))
PY
  check_sums extra
  done_step extra
fi

# 3. Models and results; each step's outputs are checked before it is stamped.
run_step() {
  local step="$1"
  stamp "$step" && return 0
  say "step $step"
  "$VPY" "$ROOT/tools/make_corpus.py" "$CORPUS" "$WHEELS" "$step" >"$CORPUS/.log-$step" 2>&1 \
    || { tail -n 20 "$CORPUS/.log-$step" >&2; die "step $step failed (log: $CORPUS/.log-$step)"; }
  tail -n 1 "$CORPUS/.log-$step"
  done_step "$step"
}


run_step real
check_sums real
if ! stamp nodetests-checked; then
  run_step nodetests
  got="$(cd "$CORPUS/onnx_node_tests_1.19.1" && find . -type f -print0 | LC_ALL=C sort -z \
    | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  [ "$got" = "$NODE_TESTS_DIGEST" ] || die "the node tests' digest is $got, expected $NODE_TESTS_DIGEST"
  done_step nodetests-checked
fi
run_step synthetic
check_sums synthetic
run_step contrib
check_sums contrib
run_step ortopt
run_step quantized
check_sums quantized
run_step noderesults
run_step transformers
check_sums transformers

for f in real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx synthetic/syn_mobilenet_dw_300mb.onnx \
  synthetic/syn_50k_nodes.onnx contrib/contrib_results.json ort_optimized/ortopt_results.json \
  quantized/quantized_ops.json node_tests_results.json extra/silero_vad__silero_vad.onnx \
  transformers/transformers.json; do
  [ -s "$CORPUS/$f" ] || die "missing $CORPUS/$f"
done
echo "$CORPUS_VERSION" > "$CORPUS/.complete"
say "complete: $(ls "$CORPUS/real" | wc -l) real, $(ls "$CORPUS/ort_optimized"/*.onnx | wc -l) ORT-optimised, \
$(ls "$CORPUS/contrib"/*.onnx | wc -l) contrib, $(ls "$CORPUS/transformers"/*.onnx | wc -l) transformers, $(ls "$CORPUS/onnx_node_tests_1.19.1" | wc -l) node tests in $CORPUS"
