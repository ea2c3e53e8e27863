#!/usr/bin/env bash
# On one H200, in one call (session 9, call 25): Nsight Compute on the best bulk-copy variant of call 24
# (M = 16, down projection) beside call 22's champion, then a GA run at M = 16 with the bulk copies in
# its gene space (and a seed using them), and core bench on its champion.
# Usage: bash benchmarks/gpu_mma_w_bulk_ga.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
C='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma_w","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"layout":"gptq","stages":0,"vec":1,"w_load":".cs","x_load":""},"parallel_config":{"kblocks":4,"ksplit":2,"rows_per_block":1,"threads":256},"register_allocation":{"batch":2,"min_blocks":2,"pipeline":"off","regs":{"scale":"word","unroll":1}}}'
B='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma_w","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"copy":"bulk","layout":"gptq","stages":2,"vec":2,"w_load":"","x_load":""},"parallel_config":{"kblocks":8,"ksplit":2,"rows_per_block":1,"threads":256},"register_allocation":{"batch":1,"min_blocks":2,"pipeline":"off","regs":{"scale":"word","unroll":1}}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
NCU="ncu --clock-control none -k regex:abebot -s 3 -c 1 --import-source no --section SpeedOfLight --section MemoryWorkloadAnalysis
 --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section SourceCounters -f"
for which in bulk regs; do
  if [ $which = bulk ]; then G=$B; else G=$C; fi
  timeout 100 $NCU -o "$OUT/$which" $SWEEP '{"m":16}' "$G" --launches 5 > "$OUT/$which.ncu.log" 2>&1
  ncu -i "$OUT/$which.ncu-rep" --page details > "$OUT/$which.details.txt" 2>&1
  ncu -i "$OUT/$which.ncu-rep" --page source --print-source sass --csv > "$OUT/$which.sass.csv" 2>&1
done
timeout 60 $SWEEP '{"m":16}' "$B" --vary parallel_config.kblocks=16 --vary parallel_config.threads=512 \
  --vary register_allocation.min_blocks=1 --vary memory_pattern.vec=4 > "$OUT/sweep16.log" 2>&1
timeout 330 python3 benchmarks/gpu_runs.py --out "$OUT/ga" --runs 'w4a16:cuda:32:12:{"m":16}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 300 > "$OUT/ga.log" 2>&1
for which in bulk regs; do grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Eligible Warps|Issued Warp|Block Limit|Dynamic Shared" "$OUT/$which.details.txt" | head -14; done
grep -A12 "^NVIDIA" "$OUT/sweep16.log"; cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
