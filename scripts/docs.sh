#!/usr/bin/env bash
# Regenerates the command outputs shown in docs/*.md (the ``` blocks whose lines start with
# `$ `): runs every command as tests/docs_transcripts.rs does and rewrites the blocks whose
# output changed. The same test, run by scripts/test.sh, fails while a page is stale.
#   scripts/docs.sh
# Uses the corpus and venv of scripts/corpus.sh (built first if missing). A rewritten block
# shows the whole output: shorten it again with `[...]` lines where the page should.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ONNX_SAFEIFY_CACHE:-$HOME/.cache/onnx-safeify}"
ONNX_SAFEIFY_CACHE="$CACHE" bash "$ROOT/scripts/corpus.sh"
export ONNX_SAFEIFY_CACHE="$CACHE" ONNX_SAFEIFY_CORPUS="$CACHE/corpus" ONNX_SAFEIFY_VENV="$CACHE/venv"
ORT_LIB="$(ls "$CACHE"/venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -n 1 || true)"
if [ -n "$ORT_LIB" ]; then export ORT_DYLIB_PATH="$ORT_LIB"; fi
cd "$ROOT"
ONNX_SAFEIFY_UPDATE_DOCS=1 cargo test --locked --test docs_transcripts -- --nocapture
git --no-pager diff --stat -- docs/ || true
