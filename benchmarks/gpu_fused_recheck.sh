#!/usr/bin/env bash
# On one H200, in one call (session 14): the fused RMSNorm + QKV goal (faster than our two separate
# champions together) re-checked under session 13's timing. Call 32 met it by 1.2% (16.85 against
# 15.09 + 1.96 us), with the 1-row RMSNorm timed by the old graph method, which booked preparation
# savings to some small kernels; a 1-row RMSNorm's cases now go through the chained graph timing
# (torch_runtime.replay_chain). The three workloads are evolved as in call 32 (gpu_fused_final.sh, less
# its 64-row run, which calls 50-51 settled) and each champion is re-timed by core bench, 5 rounds,
# beside its baselines.
# Usage: bash benchmarks/gpu_fused_recheck.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
W='--weights time=0.8,memory=0.1,stability=0.1'
timeout 500 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm_w4a16:cuda:32:6;w4a16:cuda:32:5:{"n":10240,"k_groups":64};rmsnorm:cuda:32:3:{"rows":1}' \
  --extra "$W" --bench-rounds 5 --timeout-s 150 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
