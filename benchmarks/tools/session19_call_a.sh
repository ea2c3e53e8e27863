#!/usr/bin/env bash
# Session 19, device call A: why the Triton judge tests failed in call 66 (full tracebacks this time), and
# the decode step re-run after the inv_freq fix. Usage (on the H200, repository root, wheels in .whl/):
#   bash benchmarks/tools/session19_call_a.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/DEVICE.txt"
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)" >> "$OUT/DEVICE.txt"
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?"; tail -${TAILN:-6} "$OUT/$name.log"; }
TAILN=30 step judge_tests 280 python3 -m pytest -q -p no:cacheprovider -rf --tb=short --durations=10 tests/test_judge_gpu.py
bash benchmarks/tools/decode_step_gpu.sh "$OUT/decode"
