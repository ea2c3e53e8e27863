#!/usr/bin/env bash
# On one H200, in one call (session 12, right after gpu_rows_full.sh): a second GA run at 64 rows and
# one at 16 rows with the template as in that call, each champion benched with 5 rounds.
# Usage: bash benchmarks/gpu_rows_confirm.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 290 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:16:{"rows":64,"residual":true};rmsnorm:cuda:32:8:{"rows":16,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 170 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
