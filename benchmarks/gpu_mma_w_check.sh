#!/usr/bin/env bash
# On one H200, in one call: the weights-as-A tensor-core path (core/workloads/w4a16/cuda_mma_w.py)
# checked on odd shapes, zero points and fp16, then its one-gene variants and a grid timed beside
# cuBLAS and torch's int4 kernel at M = 16 and M = 1 (down projection), and Nsight Compute on its
# M = 16 seed. Usage: bash benchmarks/gpu_mma_w_check.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
W='{"parallel_config":{"threads":256,"ksplit":4,"rows_per_block":1,"kblocks":4},"memory_pattern":{"vec":2,"w_load":".L1::no_allocate","x_load":".L1::evict_last","layout":"gptq","stages":0},"register_allocation":{"batch":4,"pipeline":"off","regs":{"scale":"word","unroll":1},"min_blocks":1},"instruction_sequence":{"nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"],"first":"words","dequant":"half2","math":"mma_w"}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
VARY="--vary register_allocation.batch=1,2,8 --vary parallel_config.threads=128,512 --vary parallel_config.ksplit=1,2,8
 --vary parallel_config.kblocks=1,2,8,16 --vary memory_pattern.vec=1,4 --vary register_allocation.min_blocks=2
 --vary memory_pattern.w_load=,.nc,.cs,.nc.L1::no_allocate --vary memory_pattern.x_load=,.nc"
for P in '{"m":3,"n":1000,"k_groups":9}' '{"m":16,"n":1000,"k_groups":9,"zero_points":true}' '{"m":5,"n":520,"k_groups":3,"dtype":"float16","zero_points":true}' '{"m":13,"n":4096,"k_groups":64,"dtype":"float16"}'; do
  echo "== $P"; timeout 60 $SWEEP "$P" "$W" --vary register_allocation.batch=1,2 --vary parallel_config.kblocks=1,16 --vary memory_pattern.vec=1,4 2>&1 | grep -E "WRONG|FAIL|us$|skip" | head -12
done > "$OUT/checks.log" 2>&1
timeout 120 $SWEEP '{"m":16}' "$W" $VARY > "$OUT/sweep16.log" 2>&1
timeout 90 $SWEEP '{"m":16}' "$W" --grid --vary register_allocation.batch=2,4 --vary parallel_config.threads=128,256 \
  --vary parallel_config.kblocks=2,4,8 --vary memory_pattern.vec=1,2 > "$OUT/grid16.log" 2>&1
timeout 120 $SWEEP '{"m":1}' "$W" $VARY > "$OUT/sweep1.log" 2>&1
timeout 120 ncu --clock-control none -k regex:abebot -s 3 -c 1 --import-source no --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats --section SourceCounters \
  -f -o "$OUT/w16" $SWEEP '{"m":16}' "$W" --launches 5 > "$OUT/w16.ncu.log" 2>&1
ncu -i "$OUT/w16.ncu-rep" --page details > "$OUT/w16.details.txt" 2>&1
ncu -i "$OUT/w16.ncu-rep" --page source --print-source sass --csv > "$OUT/w16.sass.csv" 2>&1
cat "$OUT/checks.log"; tail -32 "$OUT/sweep16.log"; tail -22 "$OUT/grid16.log" | head -12; tail -30 "$OUT/sweep1.log"
grep -E "Duration|DRAM Throughput|Registers Per|Issue Slots Busy|Executed Instructions  |Achieved Occupancy" "$OUT/w16.details.txt"
