#!/usr/bin/env bash
# On a two-GPU H200 machine, in one call: the GPU tests of the launch checks, the GPU cheat suite,
# evaluations per minute on one GPU and on both (same seed, separate runs folders so neither finds
# the other's compiled kernels), and the new workloads through the generic evaluator.
# Usage: bash benchmarks/gpu_devices_check.sh OUT [PAIRS for gpu_boundary_check.py]
set -u
OUT=$1
PAIRS=${2:-}
RUNS=${RUNS:-'gemm:triton:48:3;rmsnorm:cuda:48:3'}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/gpus.csv"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_launch_checks.py > "$OUT/pytest.log" 2>&1
timeout 90 python3 benchmarks/gpu_cheat_check.py --out "$OUT/cheats" > "$OUT/cheats.log" 2>&1
timeout 210 python3 benchmarks/gpu_runs.py --out "$OUT/one" --runs "$RUNS" --runs-dir /tmp/abebot_one \
  --bench-rounds 0 --timeout-s 150 > "$OUT/one.log" 2>&1
timeout 150 python3 benchmarks/gpu_runs.py --out "$OUT/two" --runs "$RUNS" --runs-dir /tmp/abebot_two \
  --bench-rounds 1 --extra '--devices all' --timeout-s 120 > "$OUT/two.log" 2>&1
if [ -n "$PAIRS" ]; then
  timeout 120 python3 benchmarks/gpu_boundary_check.py --out "$OUT/new" --random 1 --budget-s 100 --cli "" \
    --pairs "$PAIRS" > "$OUT/new.log" 2>&1
fi
tail -3 "$OUT/pytest.log"; cat "$OUT/cheats.log"; cat "$OUT/one/runs.md" "$OUT/two/runs.md" 2>/dev/null
grep -h "evaluations_per_device" -A3 "$OUT/two.log"; grep -h "^on \|champion " "$OUT/two/"*.bench.log 2>/dev/null
[ -f "$OUT/new/check.md" ] && cat "$OUT/new/check.md"
