#!/usr/bin/env bash
# On one H200, in one call (session 12): RMSNorm + residual once the template's rows path lost its
# 64-bit row logic and whole rows got a vector path without bound checks (the instructions every warp
# issues before its first load, found by comparing with a hand-written kernel in calls 38-45).
# First the same decomposition as gpu_rows_floor.sh, then a GA run at 64 rows and at 1 row, each
# champion benched with 5 rounds. Goal: 1.2x torch.compile.
# Usage: bash benchmarks/gpu_rows_full.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
bash benchmarks/gpu_rows_floor.sh "$OUT/floor"
timeout 330 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:16:{"rows":64,"residual":true};rmsnorm:cuda:32:8:{"rows":1,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 200 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
