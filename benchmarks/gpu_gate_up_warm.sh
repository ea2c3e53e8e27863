#!/usr/bin/env bash
# On one H200, in one call (session 9, call 28): the gate_up projection at M = 1 (K 8192 -> N 57344),
# as call 20 ran it (a GA warm-started from a QKV run) but longer: QKV 6 generations, then gate_up
# 14 generations from its best genomes, each champion re-timed by core bench beside torch's int4 kernel.
# Usage: bash benchmarks/gpu_gate_up_warm.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 500 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'w4a16:cuda:32:6:{"n":10240,"k_groups":64};+w4a16:cuda:32:14:{"n":57344,"k_groups":64}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 300 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
