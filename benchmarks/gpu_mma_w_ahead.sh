#!/usr/bin/env bash
# On one H200, in one call (session 8, call 23): the weights-as-A path with x only two steps ahead
# (pipeline = next) and the words 4 or 8 steps ahead, around call 22's champion, checked on odd
# shapes and timed beside cuBLAS at M = 16 and M = 1; then a GA run at M = 16 and core bench.
# Usage: bash benchmarks/gpu_mma_w_ahead.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
C='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma_w","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"layout":"gptq","stages":0,"vec":1,"w_load":".cs","x_load":""},"parallel_config":{"kblocks":4,"ksplit":2,"rows_per_block":1,"threads":256},"register_allocation":{"batch":2,"min_blocks":2,"pipeline":"off","regs":{"scale":"word","unroll":1}}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
for P in '{"m":3,"n":1000,"k_groups":9}' '{"m":13,"n":4096,"k_groups":64,"dtype":"float16","zero_points":true}'; do
  echo "== $P"; timeout 50 $SWEEP "$P" "$C" --grid --vary register_allocation.batch=4,8 --vary register_allocation.pipeline=next 2>&1 | grep -E "WRONG|FAIL|us$" | head -8
done > "$OUT/checks.log" 2>&1
timeout 120 $SWEEP '{"m":16}' "$C" --grid --vary register_allocation.pipeline=next --vary register_allocation.batch=4,8 \
  --vary register_allocation.min_blocks=1,2 --vary parallel_config.threads=128,256 --vary parallel_config.ksplit=1,2,4 > "$OUT/grid16.log" 2>&1
timeout 60 $SWEEP '{"m":1}' "$C" --grid --vary register_allocation.pipeline=next --vary register_allocation.batch=4,8 \
  --vary memory_pattern.vec=1,2 --vary parallel_config.threads=128,256 > "$OUT/grid1.log" 2>&1
cat "$OUT/checks.log"; grep -A14 "^NVIDIA" "$OUT/grid16.log"; grep -A10 "^NVIDIA" "$OUT/grid1.log"; grep -c WRONG "$OUT"/grid*.log
timeout 300 python3 benchmarks/gpu_runs.py --out "$OUT/ga" --runs 'w4a16:cuda:32:12:{"m":16}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 270 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
