#!/usr/bin/env bash
# Session 20, device call A: issue 35's GPU cheat suites through the final judge (CUDA C planted cheats, then
# the Triton judge tests), then the first GPU runs of the PTX edit check (issue 31) and of the wgmma template's
# configurations including split-K (issue 30). Everything under $OUT is packed into one archive.
# Usage (H200, repository root, .whl/ carried): bash benchmarks/tools/session20_call_a.sh $OUT
set -u
OUT=${1:?OUT}
D=$OUT/a
mkdir -p "$D"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$D/$name.txt" 2> "$D/$name.log"
         echo "$name rc=$? at ${SECONDS}s"; grep -v '^USDT' "$D/$name.txt" "$D/$name.log" | tail -${TAILN:-6}; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$D/gpu.txt" 2>&1
python3 -c "import torch, triton, cupy; print(torch.__version__, torch.version.cuda, triton.__version__, cupy.__version__)" >> "$D/gpu.txt" 2>&1
TAILN=16 step cheats 100 python3 -m benchmarks.tools.gpu_cheat_check --out "$D/cheats" --rows 16 --cols 8192
TAILN=8 step judge_triton 200 python3 -m pytest -q -p no:cacheprovider tests/test_judge_gpu.py
TAILN=30 step wgmma 170 python3 benchmarks/tools/wgmma_gpu_check.py --out "$D/wgmma"
rm -rf "$D"/wgmma/cache "$D"/cheats/runs 2>/dev/null
tar -cJf "$OUT/call_a.tar.xz" -C "$OUT" a && rm -rf "$D"
