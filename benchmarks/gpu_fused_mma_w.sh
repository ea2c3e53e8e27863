#!/usr/bin/env bash
# On one H200, in one call (session 10, call 30): the fused RMSNorm + QKV (M = 1) with the
# weights-as-A path now offered to it, evolved beside the two separate champions it must beat (W4A16
# at the QKV shape and RMSNorm of one row), each re-timed by core bench; then the down projection at
# M = 1 again, with the bulk ring's 3 and 6 stages now offered (goal <= 36 us).
# Usage: bash benchmarks/gpu_fused_mma_w.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
W='--weights time=0.8,memory=0.1,stability=0.1'
timeout 330 python3 benchmarks/gpu_runs.py --out "$OUT/fused" \
  --runs 'rmsnorm_w4a16:cuda:32:10;w4a16:cuda:32:6:{"n":10240,"k_groups":64};rmsnorm:cuda:32:4:{"rows":1}' \
  --extra "$W" --bench-rounds 2 --timeout-s 150 > "$OUT/fused.log" 2>&1
cat "$OUT/fused/runs.md"; grep -h -A8 "median of" "$OUT"/fused/*.bench.log
timeout 250 python3 benchmarks/gpu_runs.py --out "$OUT/down" --runs 'w4a16:cuda:32:14' \
  --extra "$W" --bench-rounds 2 --timeout-s 230 > "$OUT/down.log" 2>&1
cat "$OUT/down/runs.md"; grep -h -A8 "median of" "$OUT"/down/*.bench.log
