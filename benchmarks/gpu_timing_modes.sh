#!/usr/bin/env bash
# On one H200, in one call (prepared in session 12, not yet run): RMSNorm + residual at 16 and 64 rows,
# each call-47/46 champion with streaming cache hints (.cs loads and stores) and the same genome with
# plain hints, beside torch.compile, timed by the protocol and by a graph of launches alone on cases
# prepared before it (gpu_timing_modes.py). At 16 rows the .cs kernels timed below an empty launch in
# call 47; if the launches-only timing gives .cs and plain about the same time there, the protocol
# books to a kernel what it changes in the next launch's preparation.
# Usage: bash benchmarks/gpu_timing_modes.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R16_CS='{"instruction_sequence":{"body":["LOAD_W","LOAD_X","REDUCE","STORE"]},"memory_pattern":{"load":".cs","store":".cs","vec":8},"parallel_config":{"rows_per_block":1,"schedule":"rows","split":4,"threads":256,"waves":1},"register_allocation":{"regs":{"reduce":"all_warps","row":"registers"}}}'
R64_CS='{"instruction_sequence":{"body":["LOAD_X","LOAD_W","REDUCE","STORE"]},"memory_pattern":{"load":".cs","store":".cs","vec":4},"parallel_config":{"rows_per_block":1,"schedule":"rows","split":1,"threads":512,"waves":1},"register_allocation":{"regs":{"reduce":"all_warps","row":"reread"}}}'
PLAIN='s/"load":".cs","store":".cs"/"load":"","store":""/'
for rows in 16 64; do
  var=R${rows}_CS
  cs=${!var}
  plain=$(echo "$cs" | sed "$PLAIN")
  timeout 200 python3 benchmarks/gpu_timing_modes.py rmsnorm "{\"rows\":$rows,\"residual\":true}" "$cs" "$plain" \
    --baselines vllm_native_compile --rounds 5 > "$OUT/modes$rows.log" 2>&1
done
for rows in 16 64; do echo "== $rows rows"; sed -n '/medians of/,$p' "$OUT/modes$rows.log"; tail -3 "$OUT/modes$rows.log"; done
