#!/usr/bin/env bash
# On one H200, in one call: the weights-as-A tensor-core path with its scales a group ahead, and its
# cp.async ring (memory_pattern.stages), checked on odd shapes, zero points and fp16, then timed beside
# cuBLAS and torch's int4 kernel at M = 16 and M = 1 (down projection). Usage: bash benchmarks/gpu_mma_w_ring.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
W='{"parallel_config":{"threads":256,"ksplit":4,"rows_per_block":1,"kblocks":4},"memory_pattern":{"vec":2,"w_load":".L1::no_allocate","x_load":".L1::evict_last","layout":"gptq","stages":0},"register_allocation":{"batch":4,"pipeline":"off","regs":{"scale":"word","unroll":1},"min_blocks":1},"instruction_sequence":{"nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"],"first":"words","dequant":"half2","math":"mma_w"}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
for P in '{"m":3,"n":1000,"k_groups":9}' '{"m":16,"n":1000,"k_groups":9,"zero_points":true}' '{"m":5,"n":512,"k_groups":3,"dtype":"float16","zero_points":true}' '{"m":13,"n":4096,"k_groups":64,"dtype":"float16"}'; do
  echo "== $P"; timeout 60 $SWEEP "$P" "$W" --vary memory_pattern.stages=2,4,8 --vary memory_pattern.vec=1 --vary parallel_config.kblocks=1,16 2>&1 | grep -v "^\s*$" | tail -14
done > "$OUT/checks.log" 2>&1
timeout 150 $SWEEP '{"m":16}' "$W" --grid --vary memory_pattern.stages=0,2,4,8 --vary memory_pattern.vec=1,2 \
  --vary register_allocation.min_blocks=1,2 --vary parallel_config.threads=128,256 > "$OUT/grid16.log" 2>&1
timeout 100 $SWEEP '{"m":16}' "$W" --grid --vary memory_pattern.stages=4,8 --vary parallel_config.kblocks=2,8 \
  --vary parallel_config.ksplit=2,8 --vary memory_pattern.vec=1,2 > "$OUT/grid16b.log" 2>&1
timeout 100 $SWEEP '{"m":1}' "$W" --grid --vary memory_pattern.stages=0,4,8 --vary memory_pattern.vec=1,2 \
  --vary register_allocation.min_blocks=1,2 > "$OUT/grid1.log" 2>&1
cat "$OUT/checks.log"; for f in grid16 grid16b grid1; do grep -B2 -A14 "^NVIDIA" "$OUT/$f.log" | head -18; grep -c WRONG "$OUT/$f.log"; done
