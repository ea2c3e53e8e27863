#!/usr/bin/env bash
# On one H200, in one call (session 14): the adversarial and boundary checks again at the head, after
# session 13's chained graph timing and launch floor. First the planted cheats (gpu_cheat_check.py) at
# a decode size, 16 rows x 8192, whose cases are timed in chains of graph_block cases, and at the
# default 4096 x 8192 (old timing); then workload x GPU backend pairs through the generic evaluator
# (seeds and 2 random genomes each, exported kernels re-run standalone): PAIRS as gpu_boundary_check's
# --pairs, or every pair when it is empty, within BUDGET_S seconds (default 300).
# Usage: [PAIRS='gemm:cuda;rope:triton'] [BUDGET_S=300] bash benchmarks/gpu_regression_check.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 150 python3 benchmarks/gpu_cheat_check.py --out "$OUT/cheats16" --rows 16 --cols 8192 > "$OUT/cheats16.log" 2>&1
timeout 150 python3 benchmarks/gpu_cheat_check.py --out "$OUT/cheats4096" > "$OUT/cheats4096.log" 2>&1
timeout $(( ${BUDGET_S:-300} + 30 )) python3 benchmarks/gpu_boundary_check.py --out "$OUT/chk" --random 2 \
  --budget-s "${BUDGET_S:-300}" --cli '' --pairs "${PAIRS:-}" > "$OUT/chk.log" 2>&1
cat "$OUT/cheats16.log" "$OUT/cheats4096.log"; cat "$OUT/chk/check.md"
