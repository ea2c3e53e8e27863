#!/usr/bin/env bash
# Session 19, device call B: event timing without the host's queueing time (tests/test_timing_gpu.py), the
# Triton judge cheats after their fix, and issue 27's agreement check: the five w4a16 entries through the
# protocol and the second method in one process. Usage (on the H200, repository root, wheels in .whl/):
#   bash benchmarks/tools/session19_call_b.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?"; tail -${TAILN:-6} "$OUT/$name.log"; }
TAILN=25 step gpu_tests 215 python3 -m pytest -q -p no:cacheprovider -rf --tb=short tests/test_timing_gpu.py tests/test_judge_gpu.py
TAILN=40 step recheck 300 python3 -m benchmarks.tools.cold_recheck --out "$OUT/recheck" --rounds 1 \
    --only down_m16,qkv_m1,o_m1,down_m1,gate_up_m1
