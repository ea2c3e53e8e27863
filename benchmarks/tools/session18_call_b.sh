#!/usr/bin/env bash
# Session 18, device call B: the judge process on the GPU (its tests, the planted cheats, GA throughput
# before and after it, in the same call) and the decode step. Usage (on the H200, repository root, with the
# pre-judge tree of main, 73d2781, unpacked in .old/): bash benchmarks/tools/session18_call_b.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/DEVICE.txt"
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?"; tail -${TAILN:-6} "$OUT/$name.log"; }
TAILN=4 step judge_tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_judge_gpu.py tests/test_launch_checks.py
TAILN=14 step cheats 100 python3 -m benchmarks.tools.gpu_cheat_check --out "$OUT/cheats" --rows 16 --cols 8192
RUNS='rmsnorm:cuda:32:2;gemm:triton:16:2'
TAILN=12 step runs_new 150 python3 -m benchmarks.tools.gpu_runs --out "$OUT/runs_new" --runs "$RUNS" --bench-rounds 0 --runs-dir /tmp/rn
(cd .old && export PYTHONPATH=/tmp/site:$PWD && TAILN=12 step runs_old 150 python3 -m benchmarks.tools.gpu_runs --out "$OUT/runs_old" --runs "$RUNS" --bench-rounds 0 --runs-dir /tmp/ro)
bash benchmarks/tools/decode_step_gpu.sh "$OUT/decode"
