#!/usr/bin/env bash
# On one H200, in one call (session 11, after gpu_rows_64.sh): RMSNorm + residual at 64 and 4 rows
# once a block's rows are normalised together (their loads in flight at once, one reduction, and
# over a cluster one exchange for the whole group), so that a cluster can take a group of rows:
# 64 rows as 16 clusters instead of 64. Each run benched with 5 rounds. Goal: 1.2x torch.compile.
# Usage: bash benchmarks/gpu_rows_groups.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 500 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:16:{"rows":64,"residual":true};rmsnorm:cuda:32:8:{"rows":4,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 240 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
