#!/usr/bin/env bash
# On one H200, in one call (session 14): the adversarial and boundary checks again at the head, after
# session 13's chained graph timing and launch floor. First the planted cheats (gpu_cheat_check.py) at
# a decode size, 16 rows x 8192, whose cases are timed in chains of graph_block cases (the cheats were
# last run at 4096 rows, with the old timing); then every workload x GPU backend through the generic
# evaluator (seeds and 2 random genomes each, exported kernels re-run standalone).
# Usage: bash benchmarks/gpu_regression_check.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 150 python3 benchmarks/gpu_cheat_check.py --out "$OUT/cheats16" --rows 16 --cols 8192 > "$OUT/cheats16.log" 2>&1
timeout 330 python3 benchmarks/gpu_boundary_check.py --out "$OUT/chk" --random 2 --budget-s 300 --cli '' > "$OUT/chk.log" 2>&1
cat "$OUT/cheats16.log"; cat "$OUT/chk/check.md"
