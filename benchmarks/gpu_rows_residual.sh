#!/usr/bin/env bash
# On one H200, in one call: RMSNorm + residual (vLLM's fused_add_rms_norm) at decode sizes, 64, 16,
# 4 and 1 rows, each evolved for 10 generations and its champion re-timed by core bench (3 rounds)
# beside torch.compile. Since session 11 the gene space splits a row over the blocks of a thread
# block cluster (parallel_config.split) and offers a one-barrier reduction (reduce = all_warps).
# Goal: 1.2x torch.compile at every size.
# Usage: bash benchmarks/gpu_rows_residual.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 540 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:10:{"rows":64,"residual":true};rmsnorm:cuda:32:10:{"rows":1,"residual":true};rmsnorm:cuda:32:10:{"rows":4,"residual":true};rmsnorm:cuda:32:10:{"rows":16,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 3 --timeout-s 120 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
