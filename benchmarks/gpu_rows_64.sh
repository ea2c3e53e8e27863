#!/usr/bin/env bash
# On one H200, in one call (session 11, after gpu_rows_residual.sh): RMSNorm + residual at 64 rows,
# where the cluster split did not win in call 33 (1.173x torch.compile, goal 1.2x): a longer run,
# then a second one warm-started from it (its own process and baselines), each benched with 5
# rounds; and the 1-row run again, as an independent repeat of call 33's.
# Usage: bash benchmarks/gpu_rows_64.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 560 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:16:{"rows":64,"residual":true};+rmsnorm:cuda:32:10:{"rows":64,"residual":true};rmsnorm:cuda:32:8:{"rows":1,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 200 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
