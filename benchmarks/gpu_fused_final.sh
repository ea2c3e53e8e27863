#!/usr/bin/env bash
# On one H200, in one call (session 10, call 32): with the champion ranked against the run's latest
# reference (store.reader.RunReader.top) and call 31's fastest fused genome as a seed, the fused
# RMSNorm + QKV (M = 1) beside the two separate champions it must beat (W4A16 QKV, RMSNorm of one
# row), then RMSNorm + residual at 64 rows (goal 1.2x torch.compile); each champion re-timed by
# core bench beside its baselines.
# Usage: bash benchmarks/gpu_fused_final.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
W='--weights time=0.8,memory=0.1,stability=0.1'
timeout 270 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm_w4a16:cuda:32:6;w4a16:cuda:32:5:{"n":10240,"k_groups":64};rmsnorm:cuda:32:3:{"rows":1};rmsnorm:cuda:32:5:{"rows":64,"residual":true}' \
  --extra "$W" --bench-rounds 2 --timeout-s 90 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
