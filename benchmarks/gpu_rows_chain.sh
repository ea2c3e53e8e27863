#!/usr/bin/env bash
# On one H200, in one call (session 13, call 50): the timing modes side by side at 16 and 64 rows
# (gpu_timing_modes.sh), then RMSNorm + residual at 16, 64, 1 and 4 rows evolved and benched (5 rounds)
# under the protocol's chained graph timing (torch_runtime.replay_chain).
# Usage: bash benchmarks/gpu_rows_chain.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
bash benchmarks/gpu_timing_modes.sh "$OUT/modes" 16 64
timeout 400 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:12:{"rows":16,"residual":true};rmsnorm:cuda:32:12:{"rows":64,"residual":true};rmsnorm:cuda:32:8:{"rows":1,"residual":true};rmsnorm:cuda:32:8:{"rows":4,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 140 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
