#!/usr/bin/env bash
# On one H200, in one call: RMSNorm + residual at ROWS (default 16 and 64), each call-47/46 champion
# with streaming cache hints (.cs loads and stores) and the same genome with plain hints, beside
# torch.compile and empty kernels, timed the ways gpu_timing_modes.py compares. At 16 rows the .cs
# kernels timed below an empty launch in call 47; call 48 (session 12's version: the old protocol
# beside launches alone) showed that timing books to a kernel what it changes in the next launch's
# preparation.
# Usage: bash benchmarks/gpu_timing_modes.sh OUT [ROWS...]
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R16_CS='{"instruction_sequence":{"body":["LOAD_W","LOAD_X","REDUCE","STORE"]},"memory_pattern":{"load":".cs","store":".cs","vec":8},"parallel_config":{"rows_per_block":1,"schedule":"rows","split":4,"threads":256,"waves":1},"register_allocation":{"regs":{"reduce":"all_warps","row":"registers"}}}'
R64_CS='{"instruction_sequence":{"body":["LOAD_X","LOAD_W","REDUCE","STORE"]},"memory_pattern":{"load":".cs","store":".cs","vec":4},"parallel_config":{"rows_per_block":1,"schedule":"rows","split":1,"threads":512,"waves":1},"register_allocation":{"regs":{"reduce":"all_warps","row":"reread"}}}'
PLAIN='s/"load":".cs","store":".cs"/"load":"","store":""/'
ROWS=("${@:2}")
[ ${#ROWS[@]} -gt 0 ] || ROWS=(16 64)
for rows in "${ROWS[@]}"; do
  var=R${rows}_CS
  cs=${!var:-$R16_CS}
  plain=$(echo "$cs" | sed "$PLAIN")
  timeout 200 python3 benchmarks/gpu_timing_modes.py rmsnorm "{\"rows\":$rows,\"residual\":true}" "$cs" "$plain" \
    --baselines vllm_native_compile --rounds 4 --empty 256,512 > "$OUT/modes$rows.log" 2>&1
done
for rows in "${ROWS[@]}"; do echo "== $rows rows"; sed -n '/medians of/,$p' "$OUT/modes$rows.log"; grep -m3 -i "error\|Traceback" "$OUT/modes$rows.log"; done
