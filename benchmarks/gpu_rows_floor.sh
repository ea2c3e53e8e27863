#!/usr/bin/env bash
# On one H200, in one call (session 12): RMSNorm + residual at 1 and 64 rows taken apart under the
# GA's protocol (gpu_rmsnorm_floor.py: an empty kernel of the champion's launch, one that only moves
# the data, one that also loads the weight, beside the real champions and torch.compile), to tell
# what the launch, the data and the reduction each cost.
# Usage: bash benchmarks/gpu_rows_floor.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ONE_BLOCK='{"parallel_config":{"rows_per_block":1,"schedule":"rows","split":1,"threads":1024,"waves":1},"memory_pattern":{"load":"","store":"","vec":8},"register_allocation":{"regs":{"reduce":"all_warps","row":"registers"}},"instruction_sequence":{"body":["LOAD_X","REDUCE","LOAD_W","STORE"]}}'
CLUSTER8=${ONE_BLOCK/\"split\":1,\"threads\":1024/\"split\":8,\"threads\":128}
T512=${ONE_BLOCK/\"threads\":1024/\"threads\":512}
timeout 300 python3 benchmarks/gpu_rmsnorm_floor.py --rows 1,64 --rounds 7 "$ONE_BLOCK" "$T512" "$CLUSTER8" > "$OUT/floor.log" 2>&1
sed -n '/medians of/,/^$/p' "$OUT/floor.log"; tail -3 "$OUT/floor.log"
