#!/usr/bin/env bash
# The library build/verify/export paths on a GPU (issue 28), in one go: a small Llama-3.1-70B library
# on Triton and CUDA (a few entries, short runs), verified, one run exported as a one-entry library.
# Usage: bash scripts/library_gpu.sh [OUT]   (default /tmp/abebot-library-gpu; about 10-20 minutes on an H200)
# It exits non-zero at the first step that fails; the last lines are the verify tables.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/abebot-library-gpu}
RUNS="$OUT/runs"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -m core workloads
python -m core library build --model llama-3.1-70b --backend triton --ops down,rmsnorm,silu_mul,rope,lm_head \
    --m 1,16 --budget 2 --population 8 --rounds 2 --out "$OUT/lib-triton" --runs-dir "$RUNS"
python -m core library build --model llama-3.1-70b --backend cuda --ops down,qkv --m 1 --budget 2 --population 8 \
    --rounds 2 --out "$OUT/lib-cuda" --runs-dir "$RUNS"
python -m core export lib-llama-3_1-70b-cuda-down-m1 --out "$OUT/export-down-m1" --library --runs-dir "$RUNS"
python -m core library verify "$OUT/export-down-m1" --runs-dir "$RUNS"
python -m core library verify "$OUT/lib-cuda" --runs-dir "$RUNS"
python -m core library verify "$OUT/lib-triton" --runs-dir "$RUNS"
