#!/usr/bin/env bash
# Session 19, device call F: the CUDA C planted cheats again after the fix to batched verification (call 71 found
# memo_by_address `ok`). Usage (on the H200, repository root, wheels in .whl/): bash benchmarks/tools/session19_call_f.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
timeout 90 python3 -m benchmarks.tools.gpu_cheat_check --out "$OUT/cheats" --rows 16 --cols 8192 > "$OUT/cheats.txt" 2>&1
echo "cheats rc=$?"; tail -14 "$OUT/cheats.txt"
