#!/usr/bin/env bash
# On one H200, in one call (prepared in session 11, run in session 12): RMSNorm + residual at
# 64 rows, the GA's champion of calls 33-36 (one block of 1024 threads a row) and its neighbours
# along the cluster split, the threads and the vector width, every one timed by the GA's own
# protocol (CUDA graphs, checked launches) in 7 interleaved rounds beside torch.compile; then the
# champion's other genes one at a time, and the split x threads grid at 16 rows, where the cluster
# won, to see how its gain changes with the number of rows. The GA runs of calls 33-36 gave
# 1.118-1.215x at 64 rows; this settles which layout is fastest there, with the spread of each.
# Usage: bash benchmarks/gpu_rows_64_sweep.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CHAMPION='{"parallel_config":{"rows_per_block":1,"schedule":"rows","split":1,"threads":1024,"waves":1},"memory_pattern":{"load":"","store":"","vec":8},"register_allocation":{"regs":{"reduce":"all_warps","row":"registers"}},"instruction_sequence":{"body":["LOAD_X","REDUCE","LOAD_W","STORE"]}}'
timeout 270 python3 benchmarks/gpu_kernel_sweep.py rmsnorm '{"rows":64,"residual":true}' "$CHAMPION" --grid \
  --vary 'parallel_config.split=1,2,4,8' --vary 'parallel_config.threads=128,256,512,1024' --vary 'memory_pattern.vec=4,8' \
  --rounds 7 --runs-dir "$OUT/runs" > "$OUT/sweep64.log" 2>&1
# the rest of the champion's genes, one at a time: where the weight load goes, cache hints, the reduction
timeout 110 python3 benchmarks/gpu_kernel_sweep.py rmsnorm '{"rows":64,"residual":true}' "$CHAMPION" \
  --vary 'instruction_sequence.body=["LOAD_X","LOAD_W","REDUCE","STORE"],["LOAD_W","LOAD_X","REDUCE","STORE"]' \
  --vary 'memory_pattern.load=.nc,.cs' --vary 'memory_pattern.store=.cs' \
  --vary 'register_allocation.regs.reduce=shuffle,smem' --vary 'parallel_config.schedule=persistent' \
  --rounds 7 --runs-dir "$OUT/runs" > "$OUT/genes64.log" 2>&1
timeout 110 python3 benchmarks/gpu_kernel_sweep.py rmsnorm '{"rows":16,"residual":true}' "$CHAMPION" --grid \
  --vary 'parallel_config.split=1,2,4,8' --vary 'parallel_config.threads=128,256,512,1024' \
  --rounds 7 --runs-dir "$OUT/runs" > "$OUT/sweep16.log" 2>&1
for f in sweep64 genes64 sweep16; do echo "== $f"; sed -n '/medians of/,$p' "$OUT/$f.log"; done
