#!/usr/bin/env bash
# On one H200, in one call: the W4A16 M = 16 tensor-core champion's one-gene variants timed side by
# side with cuBLAS (benchmarks/gpu_kernel_sweep.py), then Nsight Compute on it and on the M = 1 GEMV
# champion of the same shape (speed of light, memory, occupancy, warp stalls, issue, SASS stall
# samples), so the two weight streams can be compared.
# Usage: bash benchmarks/gpu_mma_profile.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# the champions of calls 14 (M = 16, 61.0 us) and 18 (M = 1, 37.9 us): down projection, K 28672 -> N 8192
M16='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"vec":2,"w_load":".L1::no_allocate","x_load":".L1::evict_last"},"parallel_config":{"kblocks":4,"ksplit":4,"rows_per_block":1,"threads":256},"register_allocation":{"batch":1,"pipeline":"next","regs":{"scale":"weight","unroll":2}}}'
M1='{"instruction_sequence":{"dequant":"half2","first":"words","math":"fma","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"layout":"gptq","stages":0,"vec":4,"w_load":".nc.L1::no_allocate","x_load":".nc"},"parallel_config":{"kblocks":1,"ksplit":64,"rows_per_block":1,"threads":512},"register_allocation":{"batch":1,"min_blocks":2,"pipeline":"next","regs":{"scale":"word","unroll":2}}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
timeout 150 $SWEEP '{"m":16}' "$M16" --vary register_allocation.batch=2,4 --vary parallel_config.threads=128,512 \
  --vary parallel_config.kblocks=2,8,16 --vary parallel_config.ksplit=2,8 --vary memory_pattern.vec=1,4 \
  --vary register_allocation.min_blocks=2,3,4 --vary memory_pattern.stages=2,4,8 --vary register_allocation.pipeline=off \
  --vary memory_pattern.w_load=,.nc,.cs --vary register_allocation.regs.scale=word > "$OUT/sweep16.log" 2>&1
timeout 100 $SWEEP '{"m":16}' "$M16" --grid --vary register_allocation.batch=1,2,4 --vary parallel_config.threads=128,256,512 \
  --vary register_allocation.min_blocks=1,2 > "$OUT/grid16.log" 2>&1
NCU="ncu --clock-control none -k regex:abebot -s 3 -c 1 --import-source no --section SpeedOfLight --section MemoryWorkloadAnalysis
 --section MemoryWorkloadAnalysis_Chart --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats
 --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters -f"
for which in m16 m1; do
  if [ $which = m16 ]; then G=$M16; P='{"m":16}'; else G=$M1; P='{"m":1}'; fi
  timeout 120 $NCU -o "$OUT/$which" $SWEEP "$P" "$G" --launches 5 > "$OUT/$which.ncu.log" 2>&1
  ncu -i "$OUT/$which.ncu-rep" --page details > "$OUT/$which.details.txt" 2>&1
  ncu -i "$OUT/$which.ncu-rep" --page raw --csv > "$OUT/$which.raw.csv" 2>&1
  ncu -i "$OUT/$which.ncu-rep" --page source --print-source sass --csv > "$OUT/$which.sass.csv" 2>&1
done
tail -40 "$OUT/sweep16.log"; tail -25 "$OUT/grid16.log"
for which in m16 m1; do tail -3 "$OUT/$which.ncu.log"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Theoretical Occupancy|Block Limit" "$OUT/$which.details.txt"; done
