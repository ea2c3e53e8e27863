#!/usr/bin/env bash
# Session 18, device call A: the library runtime and build on the GPU, attention_decode, and one champion
# under three preparations. Usage (on the H200, repository root): bash benchmarks/tools/session18_call_a.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD
git log --oneline | head -1 > "$OUT/COMMIT.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/COMMIT.txt"
python3 -c "import torch, triton, cupy; print(torch.__version__, triton.__version__, cupy.__version__)" >> "$OUT/COMMIT.txt"
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?"; tail -${TAILN:-6} "$OUT/$name.log"; }
step lib_tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_library_ops.py tests/test_library_patch_gpu.py tests/test_library_ops_launch.py
TAILN=30 step lib_overhead 120 python3 -m benchmarks.tools.library_overhead --device cuda
TAILN=12 step kernel_conditions 90 python3 -m benchmarks.tools.kernel_conditions --entry down_m16 --reps 30 --rounds 5
TAILN=30 step attention 250 python3 -m benchmarks.tools.attention_check --budget-s 200 --out "$OUT/attention.json"
TAILN=25 step lib_build 200 python3 -m core library build --model llama-3.1-70b --backend cuda --ops down,rmsnorm --m 1 \
    --budget 1 --population 8 --rounds 1 --out "$OUT/lib-cuda" --runs-dir "$OUT/runs"
TAILN=15 step lib_verify 90 python3 -m core library verify "$OUT/lib-cuda" --runs-dir "$OUT/runs"
rm -rf "$OUT/runs/.cache"
