#!/usr/bin/env bash
# On one H200, in one call (session 10, call 29): RMSNorm + residual at 4096 x 8192 evolved for
# 10 generations (goal: 95% of the copy roofline; the seed reached 93%), then the down projection at
# M = 1 on the weights-as-A path (benchmarks/gpu_down_m1.sh; goal <= 36 us).
# Usage: bash benchmarks/gpu_down_rms.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 110 python3 benchmarks/gpu_runs.py --out "$OUT/rms" --runs 'rmsnorm:cuda:32:10:{"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 100 > "$OUT/rms.log" 2>&1
cat "$OUT/rms/runs.md"; grep -h -A8 "median of" "$OUT"/rms/*.bench.log
bash benchmarks/gpu_down_m1.sh "$OUT/down"
