#!/usr/bin/env bash
# On one H200, in one call (session 9, call 27): two more GA runs at M = 16 (down projection), each in
# its own process with its own baselines, seeded with call 26's champion among the others, each
# champion re-timed by core bench (3 rounds): does 2.5x cuBLAS hold outside the run that found it?
# Usage: bash benchmarks/gpu_mma_w_repeat.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
for r in a b; do
  timeout 200 python3 benchmarks/gpu_runs.py --out "$OUT/ga_$r" --runs 'w4a16:cuda:32:6:{"m":16}' \
    --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 3 --timeout-s 180 > "$OUT/ga_$r.log" 2>&1
  cat "$OUT/ga_$r/runs.md"; grep -h -A8 "median of" "$OUT"/ga_$r/*.bench.log
done
