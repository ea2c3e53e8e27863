#!/usr/bin/env bash
# On one H200, in one call (session 10, call 31): the fused RMSNorm + QKV (M = 1) on the weights-as-A
# path once more, with gamma as one 16-bit pair multiply and x prefetched into L1 for the norm after
# the stream (the prefetch was removed after call 32: run today, this script measures the code
# without it), beside the two separate champions (W4A16 QKV, RMSNorm of one row), each re-timed by
# core bench; then RMSNorm + residual at 4096 x 8192 (goal 95% of the copy roofline) and at 64 rows
# (goal 1.2x torch.compile).
# Usage: bash benchmarks/gpu_fused_rows.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
W='--weights time=0.8,memory=0.1,stability=0.1'
timeout 300 python3 benchmarks/gpu_runs.py --out "$OUT/fused" \
  --runs 'rmsnorm_w4a16:cuda:32:10;w4a16:cuda:32:6:{"n":10240,"k_groups":64};rmsnorm:cuda:32:4:{"rows":1}' \
  --extra "$W" --bench-rounds 2 --timeout-s 130 > "$OUT/fused.log" 2>&1
cat "$OUT/fused/runs.md"; grep -h -A8 "median of" "$OUT"/fused/*.bench.log
timeout 250 python3 benchmarks/gpu_runs.py --out "$OUT/rms" \
  --runs 'rmsnorm:cuda:32:5:{"residual":true};rmsnorm:cuda:32:6:{"rows":64,"residual":true}' \
  --extra "$W" --bench-rounds 2 --timeout-s 170 > "$OUT/rms.log" 2>&1
cat "$OUT/rms/runs.md"; grep -h -A8 "median of" "$OUT"/rms/*.bench.log
