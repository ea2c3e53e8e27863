#!/usr/bin/env bash
# On one H200, in one call (prepared in session 11, not yet run): RMSNorm + residual at 64 rows,
# the GA's champion of calls 34-36 (one block of 1024 threads a row) and its neighbours along the
# cluster split, the threads and the vector width, every one timed by the GA's own protocol
# (CUDA graphs, checked launches) in 7 interleaved rounds beside torch.compile. The GA runs of
# calls 33-36 gave 1.118-1.215x between machines; this settles which layout is fastest at 64 rows
# with the spread of each, before anything new is built for that size.
# Usage: bash benchmarks/gpu_rows_64_sweep.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CHAMPION='{"parallel_config":{"rows_per_block":1,"schedule":"rows","split":1,"threads":1024,"waves":1},"memory_pattern":{"load":"","store":"","vec":8},"register_allocation":{"regs":{"reduce":"all_warps","row":"registers"}},"instruction_sequence":{"body":["LOAD_X","REDUCE","LOAD_W","STORE"]}}'
timeout 560 python3 benchmarks/gpu_kernel_sweep.py rmsnorm '{"rows":64,"residual":true}' "$CHAMPION" --grid \
  --vary 'parallel_config.split=1,2,4,8' --vary 'parallel_config.threads=128,256,512,1024' --vary 'memory_pattern.vec=4,8' \
  --rounds 7 --runs-dir "$OUT/runs" > "$OUT/sweep.log" 2>&1
tail -45 "$OUT/sweep.log"
