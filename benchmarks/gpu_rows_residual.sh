#!/usr/bin/env bash
# On one H200, in one call (prepared in session 10, not yet run): RMSNorm + residual (vLLM's
# fused_add_rms_norm) at decode sizes, 1, 4 and 64 rows, each evolved for 5 generations and its
# champion re-timed by core bench beside torch.compile; the champion is ranked against the run's
# latest reference since session 10 (call 31's 64-row run benched 2.66 us while its GA had timed
# 2.47 us). Goal: 1.2x torch.compile at every size.
# Usage: bash benchmarks/gpu_rows_residual.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 420 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rmsnorm:cuda:32:5:{"rows":64,"residual":true};rmsnorm:cuda:32:5:{"rows":4,"residual":true};rmsnorm:cuda:32:5:{"rows":1,"residual":true}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 3 --timeout-s 120 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
