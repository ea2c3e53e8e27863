#!/usr/bin/env bash
# On one H200, in one call (session 9): the weights-as-A path with its ring filled by Hopper bulk
# copies (memory_pattern.copy = bulk, core/workloads/w4a16/cuda_mma_w_bulk.py), checked on odd shapes
# (M 3, 5, 13, 16; N 1000, 512; zero points; fp16; warps with no group at 16 blocks along K), then
# timed beside cuBLAS and torch's int4 kernel around call 22's M = 16 champion (the base line of each
# sweep), at M = 16 and M = 1 (down projection), and the M = 1 GEMV champion re-timed.
# (batch=1: a group a slot, as every bulk kernel of call 24 was; batch cuts a slot since call 26.)
# Usage: bash benchmarks/gpu_mma_w_bulk.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
C='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma_w","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"layout":"gptq","stages":0,"vec":1,"w_load":".cs","x_load":""},"parallel_config":{"kblocks":4,"ksplit":2,"rows_per_block":1,"threads":256},"register_allocation":{"batch":2,"min_blocks":2,"pipeline":"off","regs":{"scale":"word","unroll":1}}}'
M1='{"instruction_sequence":{"dequant":"half2","first":"words","math":"fma","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"layout":"gptq","stages":0,"vec":4,"w_load":".nc.L1::no_allocate","x_load":".nc"},"parallel_config":{"kblocks":1,"ksplit":64,"rows_per_block":1,"threads":512},"register_allocation":{"batch":1,"min_blocks":2,"pipeline":"next","regs":{"scale":"word","unroll":2}}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
for P in '{"m":3,"n":1000,"k_groups":9}' '{"m":16,"n":1000,"k_groups":9,"zero_points":true}' '{"m":5,"n":512,"k_groups":3,"dtype":"float16","zero_points":true}' '{"m":13,"n":4096,"k_groups":64,"dtype":"float16"}'; do
  echo "== $P"; timeout 60 $SWEEP "$P" "$C" --grid --vary memory_pattern.copy=bulk --vary register_allocation.batch=1 --vary memory_pattern.stages=2,8 \
    --vary memory_pattern.vec=1,2 --vary parallel_config.kblocks=1,16 2>&1 | grep -E "WRONG|FAIL|rror|us$" | head -12
done > "$OUT/checks.log" 2>&1
timeout 100 $SWEEP '{"m":16}' "$C" --grid --vary memory_pattern.copy=bulk --vary register_allocation.batch=1 --vary memory_pattern.stages=2,4,8 \
  --vary memory_pattern.vec=1,2 --vary parallel_config.kblocks=2,4,8 > "$OUT/grid16.log" 2>&1
timeout 60 $SWEEP '{"m":16}' "$C" --grid --vary memory_pattern.copy=bulk --vary register_allocation.batch=1 --vary memory_pattern.stages=2,4 \
  --vary parallel_config.threads=128,512 --vary parallel_config.ksplit=1,4 > "$OUT/grid16b.log" 2>&1
timeout 100 $SWEEP '{"m":1}' "$C" --grid --vary memory_pattern.copy=bulk --vary register_allocation.batch=1 --vary memory_pattern.stages=2,4,8 \
  --vary memory_pattern.vec=1,2 --vary parallel_config.kblocks=1,2,4 > "$OUT/grid1.log" 2>&1
timeout 40 $SWEEP '{"m":1}' "$M1" > "$OUT/gemv1.log" 2>&1
cat "$OUT/checks.log"; for f in grid16 grid16b grid1 gemv1; do grep -A12 "^NVIDIA" "$OUT/$f.log"; grep -ci "wrong\|error" "$OUT/$f.log"; done
