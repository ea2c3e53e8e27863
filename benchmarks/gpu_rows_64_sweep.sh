#!/usr/bin/env bash
# On one H200, in one call (prepared in session 11, not yet run): RMSNorm + residual at 64 rows,
# the GA's champion of calls 33-36 (one block of 1024 threads a row) and its neighbours along the
# cluster split, the threads and the vector width, every one timed by the GA's own protocol
# (CUDA graphs, checked launches) in 7 interleaved rounds beside torch.compile; then the same
# split x threads grid at 1 and 16 rows, where the cluster won, to see how its gain changes with
# the number of rows. The GA runs of calls 33-36 gave 1.118-1.215x at 64 rows between machines;
# this settles which layout is fastest there, with the spread of each, before anything new is built.
# Usage: bash benchmarks/gpu_rows_64_sweep.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CHAMPION='{"parallel_config":{"rows_per_block":1,"schedule":"rows","split":1,"threads":1024,"waves":1},"memory_pattern":{"load":"","store":"","vec":8},"register_allocation":{"regs":{"reduce":"all_warps","row":"registers"}},"instruction_sequence":{"body":["LOAD_X","REDUCE","LOAD_W","STORE"]}}'
timeout 280 python3 benchmarks/gpu_kernel_sweep.py rmsnorm '{"rows":64,"residual":true}' "$CHAMPION" --grid \
  --vary 'parallel_config.split=1,2,4,8' --vary 'parallel_config.threads=128,256,512,1024' --vary 'memory_pattern.vec=4,8' \
  --rounds 7 --runs-dir "$OUT/runs" > "$OUT/sweep64.log" 2>&1
for rows in 1 16; do
  timeout 130 python3 benchmarks/gpu_kernel_sweep.py rmsnorm "{\"rows\":$rows,\"residual\":true}" "$CHAMPION" --grid \
    --vary 'parallel_config.split=1,2,4,8' --vary 'parallel_config.threads=128,256,512,1024' \
    --rounds 7 --runs-dir "$OUT/runs" > "$OUT/sweep$rows.log" 2>&1
done
for f in sweep64 sweep1 sweep16; do echo "== $f"; sed -n '/medians of/,$p' "$OUT/$f.log"; done
