#!/usr/bin/env bash
# On one H200, in one call (session 13): RMSNorm + residual at 16, 64, 1 and 4 rows evolved and benched
# (5 rounds) under the protocol's block-prepared graph timing (timing.graph_block), after the timing
# modes compared side by side at 16 and 64 rows (gpu_timing_modes.sh).
# Usage: bash benchmarks/gpu_rows_blocks.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
bash benchmarks/gpu_timing_modes.sh "$OUT/modes" 16 64
timeout 430 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:12:{"rows":16,"residual":true};rmsnorm:cuda:32:12:{"rows":64,"residual":true};rmsnorm:cuda:32:8:{"rows":1,"residual":true};rmsnorm:cuda:32:8:{"rows":4,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 140 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
